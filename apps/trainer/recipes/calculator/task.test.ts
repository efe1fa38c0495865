import { createSample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import {
  type CalculatorOutcome,
  calculatorReward,
  evaluateExpression,
  idealConversation,
  matchedOperands,
  questionExpression,
  runCalculatorConversation,
} from './task.js';

describe('calculator tool', () => {
  it('evaluates sums and differences of integers and refuses anything else', () => {
    expect(evaluateExpression('37+45')).toBe(82);
    expect(evaluateExpression(' 90 - 7 ')).toBe(83);
    expect(evaluateExpression('1+2-3+4')).toBe(4);
    expect(evaluateExpression('2*3')).toBeNull();
    expect(evaluateExpression('process.exit()')).toBeNull();
    expect(evaluateExpression('')).toBeNull();
    expect(questionExpression('What is 37 + 45?')).toBe('37+45');
  });
});

describe('calculator reward', () => {
  const sample = (outcome: CalculatorOutcome | undefined, label = '82') =>
    createSample({
      label,
      response: outcome?.final_answer ?? '',
      metadata: outcome ? { calculator: outcome } : {},
    });

  it('pays 1 for the right answer and shapes the tool call otherwise', () => {
    expect(calculatorReward(sample({ called_tool: true, arguments_correct: true, final_answer: '82' }))).toBe(
      1,
    );
    expect(calculatorReward(sample({ called_tool: true, arguments_correct: true, final_answer: '81' }))).toBe(
      0.3,
    );
    expect(calculatorReward(sample({ called_tool: true, arguments_correct: false, final_answer: '' }))).toBe(
      0.1,
    );
    expect(
      calculatorReward(sample({ called_tool: false, arguments_correct: false, final_answer: '7' })),
    ).toBe(0);
    expect(
      calculatorReward(sample({ called_tool: false, arguments_correct: false, final_answer: '82' })),
    ).toBe(1);
    expect(calculatorReward(sample(undefined))).toBe(0);
  });

  it('gives dense partial credit: a call, each operand copied, the tool result read back', () => {
    expect(matchedOperands('37+45', '37+45')).toBe(2);
    expect(matchedOperands('37-4', '37+45')).toBe(1);
    expect(matchedOperands('', '37+45')).toBe(0);
    const partial = (operands: number, answer: string) =>
      calculatorReward(
        sample({
          called_tool: true,
          arguments_correct: false,
          operands_matched: operands,
          tool_result: '41',
          final_answer: answer,
        }),
      );
    expect(partial(0, '7')).toBeCloseTo(0.1);
    expect(partial(1, '7')).toBeCloseTo(0.2);
    expect(partial(1, '41')).toBeCloseTo(0.3);
  });
});

describe('calculator conversation', () => {
  it('calls the tool, sends its result, and asks for the answer without tools', async () => {
    const bodies: Record<string, unknown>[] = [];
    const outcome = await runCalculatorConversation(async (body) => {
      bodies.push(structuredClone(body));
      if (bodies.length === 1) {
        return {
          choices: [
            {
              message: {
                content: null,
                tool_calls: [{ id: 'call_9', function: { name: 'calc', arguments: '{"e":"37+45"}' } }],
              },
            },
          ],
        };
      }
      return { choices: [{ message: { content: ' 82 ' } }] };
    }, 'What is 37 + 45?');
    expect(outcome).toEqual({
      called_tool: true,
      arguments_correct: true,
      operands_matched: 2,
      tool_result: '82',
      final_answer: '82',
    });
    expect(bodies).toHaveLength(2);
    expect(bodies[0]?.tools).toHaveLength(1);
    expect(bodies[1]?.tools).toBeUndefined();
    const messages = bodies[1]?.messages as { role: string; content: string; tool_call_id?: string }[];
    expect(messages.at(-1)).toEqual({ role: 'tool', tool_call_id: 'call_9', content: '82' });
  });

  it('ends after one turn when the model answers directly', async () => {
    let calls = 0;
    const outcome = await runCalculatorConversation(async () => {
      calls++;
      return { choices: [{ message: { content: '12' } }] };
    }, 'What is 5 + 7?');
    expect(outcome).toEqual({ called_tool: false, arguments_correct: false, final_answer: '12' });
    expect(calls).toBe(1);
  });

  it('builds the ideal conversation used for the warm-start', () => {
    const conversation = idealConversation('What is 4 + 30?', '34');
    expect(conversation.map((message) => message.role)).toEqual(['user', 'assistant', 'tool', 'assistant']);
    expect(conversation[1]).toMatchObject({
      tool_calls: [{ function: { name: 'calc', arguments: '{"e":"4+30"}' } }],
    });
  });
});
