// Seeded generator of multi-turn agent conversations for property tests.
import type { ChatMessage, Tool, ToolCall } from '@dressage/protocol';
import { toolCallArguments } from '../messages.js';

/** A deterministic pseudo-random source (mulberry32). */
export function createRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let value = state;
    value = Math.imul(value ^ (value >>> 15), value | 1);
    value ^= value + Math.imul(value ^ (value >>> 7), value | 61);
    return ((value ^ (value >>> 14)) >>> 0) / 4294967296;
  };
}

const words = [
  'read',
  'the',
  'file',
  'config.yaml',
  'résumé',
  'naïve',
  'データ',
  '日本語のテキスト',
  'Привет',
  'مرحبا',
  '🙂',
  '👩‍💻',
  'e\u0301',
  '∑x²',
  'fn(x) => x + 1;',
  '{"nested": [1, 2]}',
  '<tool_call>',
  '</think>',
  'x'.repeat(40),
  '1234567',
  '3.14159',
  'tab\there',
  'https://example.com/a?b=c&d=e',
  '$HOME/.cache',
  "it's",
  'C:\\path\\to',
];

const spacers = [' ', ' ', ' ', '  ', '\n', '\n\n', '\t', ' \n', '\r\n', '\n\n\n'];

function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)]!;
}

/** Random text with unicode, odd whitespace and, sometimes, a long tail. */
export function randomText(random: () => number, maxWords = 12): string {
  const count = 1 + Math.floor(random() * maxWords);
  let text = '';
  for (let index = 0; index < count; index++) {
    text += pick(random, words);
    if (index < count - 1) text += pick(random, spacers);
  }
  if (random() < 0.15) text = pick(random, ['  ', '\n', ' \n ']) + text;
  if (random() < 0.15) text += pick(random, ['  ', '\n', '\n\n ']);
  if (random() < 0.05) text += ` ${'long content line\n'.repeat(50 + Math.floor(random() * 200))}`;
  return text;
}

function randomValue(random: () => number, depth: number): unknown {
  const kind = Math.floor(random() * (depth > 2 ? 4 : 6));
  switch (kind) {
    case 0:
      return randomText(random, 4);
    case 1:
      return Math.floor(random() * 1000) - 500;
    case 2:
      return random() < 0.5;
    case 3:
      return random() < 0.5 ? null : Math.round(random() * 1000) / 8;
    case 4:
      return Array.from({ length: Math.floor(random() * 3) }, () => randomValue(random, depth + 1));
    default:
      return randomArguments(random, depth + 1);
  }
}

function randomArguments(random: () => number, depth = 0): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  const count = Math.floor(random() * 4);
  for (let index = 0; index < count; index++) {
    result[pick(random, ['path', 'query', 'options', 'limit', 'content', 'ünïcode', 'items'])] = randomValue(
      random,
      depth,
    );
  }
  return result;
}

const toolNames = ['read_file', 'run_shell', 'search', 'write_file'];

/** The tools every generated conversation may offer. */
export const generatedTools: Tool[] = toolNames.map((name) => ({
  type: 'function',
  function: {
    name,
    description: `The ${name.replace('_', ' ')} tool — ünïcode in descriptions too`,
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: [] },
  },
}));

/** A generated conversation: the request messages and the assistant turns interleaved. */
export interface GeneratedConversation {
  tools: Tool[] | null;
  /** The whole message list, assistant turns included. */
  messages: ChatMessage[];
}

/** Options of {@link generateConversation}. */
export interface GenerateOptions {
  /** Assistant turns to generate. */
  turns?: number;
  /** Probability that an assistant turn has empty reasoning. */
  emptyReasoning?: number;
  /** Write tool call arguments as JSON strings (as clients send them) instead of objects. */
  stringArguments?: boolean;
}

/**
 * A conversation of `user` queries, assistant turns with reasoning, text and tool calls (nested
 * JSON arguments), and one or several tool results per call round. Assistant fields are canonical
 * (trimmed reasoning, content without outer newlines), as the proxy's parsers produce them.
 */
export function generateConversation(seed: number, options: GenerateOptions = {}): GeneratedConversation {
  const random = createRandom(seed);
  const turns = options.turns ?? 1 + Math.floor(random() * 8);
  const messages: ChatMessage[] = [];
  if (random() < 0.7) messages.push({ role: 'system', content: randomText(random) });
  messages.push({ role: 'user', content: randomText(random) });
  let callCounter = 0;
  for (let turn = 0; turn < turns; turn++) {
    const calls: ToolCall[] = [];
    const callCount = random() < 0.65 ? 1 + Math.floor(random() * 3) : 0;
    for (let index = 0; index < callCount; index++) {
      const argumentsValue = randomArguments(random);
      calls.push({
        id: `call_${seed}_${callCounter++}`,
        type: 'function',
        function: {
          name: pick(random, toolNames),
          arguments: options.stringArguments ? JSON.stringify(argumentsValue) : argumentsValue,
        },
      });
    }
    const reasoning = random() < (options.emptyReasoning ?? 0) ? '' : randomText(random).trim() || 'thinking';
    const content =
      random() < (calls.length > 0 ? 0.6 : 0) ? '' : randomText(random).replace(/^\n+|\n+$/g, '');
    const assistant: ChatMessage = { role: 'assistant', content, reasoning_content: reasoning };
    if (calls.length > 0) assistant.tool_calls = calls;
    messages.push(assistant);
    for (const call of calls) {
      messages.push({
        role: 'tool',
        content: randomText(random),
        tool_call_id: call.id,
        name: call.function.name,
      });
    }
    if (calls.length === 0 || random() < 0.3) messages.push({ role: 'user', content: randomText(random) });
  }
  return { tools: random() < 0.6 ? generatedTools : null, messages };
}

/**
 * The conversation with every top-level null tool-call parameter replaced by a string. Qwen3.5-style
 * templates print a parameter with `| string`, which @huggingface/jinja refuses for null (Python
 * prints None; the fixed renderer prints JSON null, see the README). Arguments keep their form.
 */
export function withoutNullParameters(messages: readonly ChatMessage[]): ChatMessage[] {
  return messages.map((message) => {
    if (message.role !== 'assistant' || !message.tool_calls) return message;
    const calls: ToolCall[] = message.tool_calls.map((call) => {
      const values = toolCallArguments(call) as Record<string, unknown>;
      const cleaned = Object.fromEntries(
        Object.entries(values).map(([key, value]) => [key, value ?? 'none']),
      );
      const written = typeof call.function.arguments === 'string' ? JSON.stringify(cleaned) : cleaned;
      return { ...call, function: { ...call.function, arguments: written } };
    });
    return { ...message, tool_calls: calls };
  });
}
