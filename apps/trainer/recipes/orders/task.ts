// An order-status task: a customer asks about their order; the agent may call the `order_status`
// tool (the shop's record of this customer's order, no arguments) and answers with one word.
//
// The order's status is part of the episode (the prompt record's label), not of the question: every
// question appears with every status, so the question alone never tells the answer. An agent that
// answers from memory is right one time in ten; one that calls the tool and repeats its result is
// right every time. The warm-start teaches both habits, answering from memory more often; RL finds
// out which one pays.
//
// Only type imports: this file runs from any directory, with no packages installed beside it.
import type { ChatCompletionResponse, ChatMessage, Sample, Tool } from '@dressage/protocol';

/** The ways a customer asks (a few phrasings, so the model does not learn one string). */
export const questions = ['Order status?', 'Where is my order?', 'My order?', 'Any news on my order?'];

/** What the shop's record can say about an order: each one token for the model. */
export const statuses = [
  'pending',
  'paid',
  'packed',
  'sent',
  'late',
  'lost',
  'returned',
  'cancelled',
  'held',
  'ready',
];

/** The one tool: terse, because every prompt token is paid for in every forward pass. */
export const orderStatusTool: Tool = {
  type: 'function',
  function: { name: 'order_status', parameters: { type: 'object', properties: {} } },
};

/** What a conversation leaves in the sample's metadata, for the reward and the report. */
export interface OrderOutcome {
  called_tool: boolean;
  final_answer: string;
}

/** Reward: 1 when the final answer is the order's status (the record's label), else 0. */
export function orderReward(sample: Sample): number {
  const outcome = sample.metadata.order as OrderOutcome | undefined;
  const label = String(sample.label ?? '')
    .trim()
    .toLowerCase();
  const answer = (outcome?.final_answer ?? sample.response).trim().toLowerCase();
  return label !== '' && answer === label ? 1 : 0;
}

/** The reward registry reads this export; prompt records name `order` as their `reward_fn`. */
export const rewards = { order: orderReward };

/** Posts one chat completion (through the recording proxy) and returns the checked response. */
type Chat = (request: {
  model: string;
  messages: ChatMessage[];
  tools?: Tool[];
}) => Promise<ChatCompletionResponse>;

function messageOf(response: ChatCompletionResponse): ChatCompletionResponse['choices'][number]['message'] {
  // The response schema guarantees at least one choice.
  return response.choices[0]!.message;
}

/**
 * One conversation: the question with the tool offered; if the model calls it, the tool's result
 * and a last turn without tools (the tools change, so the proxy records a second segment).
 */
export async function converse(chat: Chat, question: string, status: string): Promise<OrderOutcome> {
  const messages: ChatMessage[] = [{ role: 'user', content: question }];
  const reply = messageOf(await chat({ model: 'policy', messages, tools: [orderStatusTool] }));
  const call = reply.tool_calls?.find((candidate) => candidate.function.name === 'order_status');
  if (call === undefined) return { called_tool: false, final_answer: (reply.content ?? '').trim() };
  messages.push(
    { role: 'assistant', content: reply.content ?? '', tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: status },
  );
  const answer = messageOf(await chat({ model: 'policy', messages }));
  return { called_tool: true, final_answer: (answer.content ?? '').trim() };
}

/**
 * The recipe's whitebox agent (`agent.module`): one conversation per sample. The trainer constructs
 * it per sample and calls setup, run and teardown.
 */
export class OrderAgent {
  async setup(): Promise<void> {}

  async run(sample: Sample, context: { chat: Chat; metadata: Record<string, unknown> }): Promise<string> {
    const outcome = await converse(context.chat, String(sample.prompt), String(sample.label ?? ''));
    context.metadata.order = outcome;
    return outcome.final_answer;
  }

  async teardown(): Promise<void> {}
}

/**
 * The answer from memory: one fixed belief per phrasing, right one time in ten. A fixed belief,
 * not a random status, is what lets the warm-start learn to copy: random answers are noise the model
 * can never fit, and their gradient drowns the signal that teaches it to repeat the tool's result.
 */
export function memoryAnswer(question: string): string {
  return statuses[(Math.max(0, questions.indexOf(question)) * 3) % statuses.length]!;
}

/**
 * Supervised warm-start examples of one prompt record (`warm_start.examples`): the tool call, the
 * answer after the tool's result, and two answers from memory. The model comes out able to use
 * the tool, yet mostly answering from memory.
 */
export function warmStartExamples(record: {
  prompt?: unknown;
  label?: unknown;
}): { messages: ChatMessage[]; tools?: Tool[] }[] {
  const question: ChatMessage = { role: 'user', content: String(record.prompt) };
  const status = String(record.label);
  const call: ChatMessage = {
    role: 'assistant',
    content: '',
    reasoning_content: '',
    tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'order_status', arguments: '{}' } }],
  };
  const result: ChatMessage = { role: 'tool', tool_call_id: 'call_0', content: status };
  const fromMemory: ChatMessage = {
    role: 'assistant',
    content: memoryAnswer(String(record.prompt)),
    reasoning_content: '',
  };
  return [
    { messages: [question, call], tools: [orderStatusTool] },
    { messages: [question, call, result, { role: 'assistant', content: status, reasoning_content: '' }] },
    { messages: [question, fromMemory], tools: [orderStatusTool] },
    { messages: [question, fromMemory], tools: [orderStatusTool] },
  ];
}
