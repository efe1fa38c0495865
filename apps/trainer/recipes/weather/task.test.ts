import { readFileSync } from 'node:fs';
import { type ChatCompletionResponse, chatCompletionResponseSchema, createSample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import {
  conditions,
  episodeOf,
  forecast,
  memoryAnswer,
  memoryAnswersPerRecord,
  questions,
  runWeatherConversation,
  type WeatherOutcome,
  warmStartExamples,
  weatherReward,
  weatherTool,
  weatherTools,
} from './task.js';

const episode = { question: 'Weather today?', condition: 'rain' };

// A model answer as `context.chat` returns it: checked against the chat completion schema.
const completion = (
  content: string | null,
  calls: { id: string; function: { name: string; arguments: string } }[] = [],
): ChatCompletionResponse =>
  chatCompletionResponseSchema.parse({
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 1,
    model: 'proxy-model',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content,
          ...(calls.length > 0
            ? { tool_calls: calls.map((call, index) => ({ ...call, type: 'function', index })) }
            : {}),
        },
        finish_reason: calls.length > 0 ? 'tool_calls' : 'stop',
      },
    ],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });

describe('weather tool', () => {
  it("reports the episode's condition and takes no arguments", () => {
    expect(forecast(episode)).toBe('rain');
    expect(forecast({ ...episode, condition: 'snow' })).toBe('snow');
    expect(weatherTool.function.parameters).toEqual({ type: 'object', properties: {} });
  });

  it('ships a prompt set where the question never determines the answer', () => {
    const lines = readFileSync(new URL('./prompts.jsonl', import.meta.url), 'utf8')
      .trim()
      .split('\n');
    const records = lines.map((line) => JSON.parse(line) as { prompt: string; label: string });
    expect(new Set(records.map((record) => record.prompt))).toEqual(new Set(questions));
    for (const question of questions) {
      const labels = records.filter((record) => record.prompt === question).map((record) => record.label);
      // Every condition equally often: answering from memory is right one time in ten at best.
      expect(new Set(labels)).toEqual(new Set(conditions));
      for (const condition of conditions)
        expect(labels.filter((label) => label === condition)).toHaveLength(labels.length / conditions.length);
    }
  });
});

describe('weather reward', () => {
  const sample = (outcome: WeatherOutcome | undefined, label = 'rain') =>
    createSample({
      label,
      response: outcome?.final_answer ?? '',
      metadata: outcome ? { weather: outcome } : {},
    });

  it("pays 1 for today's condition, however it was found, and 0 otherwise", () => {
    expect(weatherReward(sample({ called_tool: true, tool_result: 'rain', final_answer: 'rain' }))).toBe(1);
    expect(weatherReward(sample({ called_tool: false, final_answer: ' Rain ' }))).toBe(1);
    expect(weatherReward(sample({ called_tool: true, tool_result: 'rain', final_answer: 'snow' }))).toBe(0);
    expect(weatherReward(sample({ called_tool: false, final_answer: '' }))).toBe(0);
    expect(weatherReward(sample(undefined, ''))).toBe(0);
  });
});

describe('weather conversation', () => {
  it('calls the tool, sends its result, and asks for the answer without tools', async () => {
    const bodies: Record<string, unknown>[] = [];
    const outcome = await runWeatherConversation(async (body) => {
      bodies.push(structuredClone(body));
      if (bodies.length === 1) {
        return completion(null, [{ id: 'call_9', function: { name: 'weather', arguments: '{}' } }]);
      }
      return completion(' rain ');
    }, episode);
    expect(outcome).toEqual({ called_tool: true, tool_result: 'rain', final_answer: 'rain' });
    expect(bodies).toHaveLength(2);
    expect(bodies[0]?.tools).toHaveLength(1);
    expect(bodies[1]?.tools).toBeUndefined();
    const messages = bodies[1]?.messages as { role: string; content: string; tool_call_id?: string }[];
    expect(messages.at(-1)).toEqual({ role: 'tool', tool_call_id: 'call_9', content: 'rain' });
  });

  it('ends after one turn when the model answers from memory', async () => {
    let calls = 0;
    const outcome = await runWeatherConversation(async () => {
      calls++;
      return completion('snow');
    }, episode);
    expect(outcome).toEqual({ called_tool: false, final_answer: 'snow' });
    expect(calls).toBe(1);
  });
});

describe('warm-start examples', () => {
  it('teaches the tool-using conversation and answers from memory', () => {
    const record = { prompt: 'Weather today?', label: 'rain', metadata: { instance_id: 'weather-0007' } };
    expect(episodeOf(record)).toEqual(episode);
    const examples = warmStartExamples(record);
    expect(examples).toHaveLength(2 + memoryAnswersPerRecord);
    const [call, answer, ...fromMemory] = examples;
    expect(call?.tools).toHaveLength(1);
    expect(call?.messages.at(-1)).toMatchObject({
      tool_calls: [{ function: { name: 'weather', arguments: '{}' } }],
    });
    expect(answer?.tools).toBeUndefined();
    expect(answer?.messages.map((message) => message.role)).toEqual([
      'user',
      'assistant',
      'tool',
      'assistant',
    ]);
    expect(answer?.messages.at(-1)).toMatchObject({ content: 'rain' });
    for (const example of fromMemory) {
      expect(example.tools).toHaveLength(1);
      expect(example.messages).toEqual([
        { role: 'user', content: 'Weather today?' },
        { role: 'assistant', content: memoryAnswer('Weather today?'), reasoning_content: '' },
      ]);
    }
  });

  it('answers from memory with one belief per question, right one time in ten over the prompts', () => {
    const records = readFileSync(new URL('./prompts.jsonl', import.meta.url), 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { prompt: string; label: string });
    const answers = new Set(records.map((record) => memoryAnswer(record.prompt)));
    expect(answers.size).toBe(questions.length);
    const right = records.filter((record) => memoryAnswer(record.prompt) === record.label).length;
    expect(right / records.length).toBeCloseTo(0.1, 10);
  });
});

// What the model sees must not change with the agent's implementation: the warm-start and the shipped
// warm-start cache were made with exactly these requests, and RL learns from them. The bodies below
// were recorded from the agent before it was built on the Toolbox; the proxy renders the prompt from
// the body, so identical bodies are identical prompts and tool lists.
describe('what the model sees', () => {
  const reply = completion;
  const cases = [
    {
      name: 'tool',
      replies: [
        reply(null, [{ id: 'call_9', function: { name: 'weather', arguments: '{}' } }]),
        reply(' rain '),
      ],
      bodies: [
        '{"model":"proxy-model","messages":[{"role":"user","content":"Weather today?"}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{}}}}]}',
        '{"model":"proxy-model","messages":[{"role":"user","content":"Weather today?"},{"role":"assistant","content":"","tool_calls":[{"id":"call_9","type":"function","function":{"name":"weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_9","content":"rain"}]}',
      ],
      outcome: { called_tool: true, tool_result: 'rain', final_answer: 'rain' },
    },
    {
      name: 'toolWithText',
      replies: [
        reply('Let me look.', [{ id: 'call_3', function: { name: 'weather', arguments: '{}' } }]),
        reply('rain'),
      ],
      bodies: [
        '{"model":"proxy-model","messages":[{"role":"user","content":"Weather today?"}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{}}}}]}',
        '{"model":"proxy-model","messages":[{"role":"user","content":"Weather today?"},{"role":"assistant","content":"Let me look.","tool_calls":[{"id":"call_3","type":"function","function":{"name":"weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_3","content":"rain"}]}',
      ],
      outcome: { called_tool: true, tool_result: 'rain', final_answer: 'rain' },
    },
    {
      name: 'memory',
      replies: [reply('snow')],
      bodies: [
        '{"model":"proxy-model","messages":[{"role":"user","content":"Weather today?"}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{}}}}]}',
      ],
      outcome: { called_tool: false, final_answer: 'snow' },
    },
    {
      name: 'unknownTool',
      replies: [reply('x', [{ id: 'c', function: { name: 'search', arguments: '{}' } }])],
      bodies: [
        '{"model":"proxy-model","messages":[{"role":"user","content":"Weather today?"}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{}}}}]}',
      ],
      outcome: { called_tool: false, final_answer: 'x' },
    },
  ];

  it('offers the same tool, byte for byte', () => {
    expect(JSON.stringify(weatherTool)).toBe(
      '{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{}}}}',
    );
    expect(JSON.stringify(weatherTools.getTools())).toBe(
      '[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{}}}}]',
    );
  });

  for (const { name, replies, bodies, outcome } of cases) {
    it(`sends byte-identical requests: ${name}`, async () => {
      const sent: string[] = [];
      let turn = 0;
      const result = await runWeatherConversation(async (body) => {
        sent.push(JSON.stringify(body));
        return replies[turn++]!;
      }, episode);
      expect(sent).toEqual(bodies);
      expect(result).toEqual(outcome);
    });
  }
});
