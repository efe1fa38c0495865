// The calculator task of the embedded recipe: the model is asked an arithmetic question, should call
// the `calc` tool with the expression, read the tool result, and answer with the number.
//
// The final answer turn is sent without tools, so the tools change between the two model turns and
// the proxy starts a second segment: every trajectory exercises TITO (the tool result is appended
// to the model's own ids), tool-result masking and multi-segment training.
import { WhiteboxAgent, type WhiteboxRunContext } from '@dressage/paddock';
import type { ChatMessage, Sample, Tool } from '@dressage/protocol';

/** Name of the one tool the agent offers. */
export const calculatorToolName = 'calc';

/**
 * The one tool the agent offers. Deliberately terse: every prompt token is paid for in every
 * forward pass on a 2-core CPU, and the renderer's fixed instruction paragraph already explains
 * the call format. (A description and a long parameter name cost ~25 tokens per segment.)
 */
export const calculatorTool: Tool = {
  type: 'function',
  function: {
    name: calculatorToolName,
    parameters: { type: 'object', properties: { e: { type: 'string' } } },
  },
};

/**
 * Evaluates `a + b`, `a - b` style expressions of non-negative integers; anything else is refused
 * (the tool never runs arbitrary code).
 */
export function evaluateExpression(expression: string): number | null {
  const compact = expression.replace(/\s+/g, '');
  if (!/^\d{1,6}([+-]\d{1,6}){0,3}$/.test(compact)) return null;
  let total = 0;
  for (const term of compact.match(/[+-]?\d+/g) ?? []) total += Number(term);
  return total;
}

/** The question's operands and operator, parsed from the prompt text ("What is 37 + 45?"). */
export function questionExpression(prompt: string): string | null {
  return prompt.match(/(\d+\s*[+-]\s*\d+)/)?.[1]?.replace(/\s+/g, '') ?? null;
}

/** What a finished calculator trajectory records in the sample's metadata for the reward. */
export interface CalculatorOutcome {
  called_tool: boolean;
  /** The tool's expression evaluates to the question's value. */
  arguments_correct: boolean;
  /** Operands of the call's expression that match the question's, position by position (0–2). */
  operands_matched?: number;
  /** What the tool returned, when it was called. */
  tool_result?: string;
  final_answer: string;
}

/** How many of the two operands of `actual` equal those of `expected` (`"7+2"` vs `"7-3"`: 1). */
export function matchedOperands(actual: string, expected: string): number {
  const operands = (text: string) => text.replace(/\s+/g, '').split(/[+-]/);
  const [left, right] = [operands(actual), operands(expected)];
  let matched = 0;
  for (let index = 0; index < 2; index++)
    if (left[index] !== undefined && left[index] !== '' && left[index] === right[index]) matched += 1;
  return matched;
}

/** The ideal conversation for a question: used for the supervised warm-start and the vocabulary. */
export function idealConversation(question: string, answer: string): ChatMessage[] {
  const expression = questionExpression(question) ?? question;
  // No system message: the offered tool and the supervised warm-start carry the instruction.
  return [
    { role: 'user', content: question },
    {
      role: 'assistant',
      content: '',
      reasoning_content: '',
      tool_calls: [
        {
          id: 'call_0',
          type: 'function',
          function: { name: calculatorToolName, arguments: JSON.stringify({ e: expression }) },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_0', content: answer },
    { role: 'assistant', content: answer, reasoning_content: '' },
  ];
}

/**
 * Reward: 1 for the right final number. Otherwise dense partial credit, at most 0.4, one part per
 * skill the task needs, so GRPO groups have variance long before the first right answer:
 * 0.1 for a calculator call, 0.1 per operand copied correctly into its expression, and 0.1 when the
 * final answer repeats the tool's result (even a wrong one: reading the result is its own skill).
 */
export function calculatorReward(sample: Sample): number {
  const outcome = sample.metadata.calculator as CalculatorOutcome | undefined;
  const label = String(sample.label ?? sample.metadata.label ?? '').trim();
  const answer = (outcome?.final_answer ?? sample.response).trim();
  if (label !== '' && answer === label) return 1;
  if (outcome === undefined || !outcome.called_tool) return 0;
  const operands = outcome.operands_matched ?? (outcome.arguments_correct ? 2 : 0);
  const readResult = outcome.tool_result !== undefined && answer !== '' && answer === outcome.tool_result;
  return (1 + operands + (readResult ? 1 : 0)) / 10;
}

/** Registered by the reward registry when the recipe names this module. */
export const rewards = { calculator: calculatorReward };

/** Posts one chat completion (through the proxy) and returns the parsed response. */
export type ChatFunction = (body: Record<string, unknown>) => Promise<Record<string, unknown>>;

interface CompletionMessage {
  content?: string | null;
  tool_calls?: { id: string; function: { name: string; arguments: string } }[] | null;
}

function firstMessage(response: Record<string, unknown>): CompletionMessage {
  const choices = response.choices as { message?: CompletionMessage }[] | undefined;
  return choices?.[0]?.message ?? {};
}

/**
 * Runs one calculator conversation: the question with the tool offered, the tool result if the
 * model called it, and a final answer turn without tools.
 */
export async function runCalculatorConversation(
  chat: ChatFunction,
  question: string,
): Promise<CalculatorOutcome> {
  const messages: ChatMessage[] = [{ role: 'user', content: question }];
  const reply = firstMessage(await chat({ model: 'proxy-model', messages, tools: [calculatorTool] }));
  const call = reply.tool_calls?.find((candidate) => candidate.function.name === calculatorToolName);
  if (call === undefined) {
    return { called_tool: false, arguments_correct: false, final_answer: (reply.content ?? '').trim() };
  }
  let expression = '';
  try {
    const parsed = JSON.parse(call.function.arguments) as { e?: unknown };
    expression = typeof parsed.e === 'string' ? parsed.e : String(parsed.e ?? '');
  } catch {
    expression = '';
  }
  const value = evaluateExpression(expression);
  const expected = questionExpression(question);
  const argumentsCorrect = value !== null && expected !== null && value === evaluateExpression(expected);
  const toolResult = value === null ? 'error: not an expression' : String(value);
  messages.push(
    {
      role: 'assistant',
      content: reply.content ?? '',
      tool_calls: [{ id: call.id, type: 'function', function: call.function }],
    },
    {
      role: 'tool',
      tool_call_id: call.id,
      content: toolResult,
    },
  );
  // No tools on the answer turn: the tools change, so the proxy starts a second segment here.
  const answer = firstMessage(await chat({ model: 'proxy-model', messages }));
  return {
    called_tool: true,
    arguments_correct: argumentsCorrect,
    operands_matched: expected === null ? 0 : matchedOperands(expression, expected),
    tool_result: toolResult,
    final_answer: (answer.content ?? '').trim(),
  };
}

/** The recipe's whitebox agent: one calculator conversation per sample, its outcome kept for the reward. */
export class CalculatorAgent extends WhiteboxAgent {
  async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    const outcome = await runCalculatorConversation(context.chat, String(sample.prompt));
    context.metadata.calculator = outcome;
    return outcome.final_answer;
  }
}

/**
 * Supervised warm-start examples of one prompt record: the tool-call turn (tools offered) and the
 * answer turn (no tools), each ending with the assistant reply to learn.
 */
export function warmStartExamples(
  record: Record<string, unknown>,
): { messages: ChatMessage[]; tools?: Tool[] }[] {
  const question = String(record.prompt ?? '');
  const answer = String(record.label ?? '');
  const conversation = idealConversation(question, answer);
  return [
    { messages: conversation.slice(0, 2), tools: [calculatorTool] },
    { messages: conversation.slice(0, 4) },
  ];
}
