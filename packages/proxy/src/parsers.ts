import { randomBytes } from 'node:crypto';
import type { Tool } from '@dressage/protocol';
import type { ParseBackend } from './config.js';
import type { EngineClient } from './engine-client.js';

/** A tool call in the response's shape (a type, not an interface: it is a completion's tool call as is). */
export type ExtractedToolCall = {
  id: string;
  type: 'function';
  index: number;
  function: { name: string; arguments: string };
};

/** The visible text and the reasoning of an output. */
export interface ReasoningSplit {
  text: string;
  reasoning: string | null;
}

/** The content left after tool calls were taken out, and the calls. */
export interface ToolCallSplit {
  content: string | null;
  toolCalls: ExtractedToolCall[];
}

/** `call` + 8 hex characters, the id shape the reference hands out. */
export function newToolCallId(): string {
  return `call${randomBytes(4).toString('hex')}`;
}

/**
 * JSON as Python's `json.dumps(value, ensure_ascii=False)` writes it (`", "` and `": "`
 * separators), so tool-call arguments match the reference byte for byte.
 */
export function pythonJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) return Number.isNaN(value) ? 'NaN' : value > 0 ? 'Infinity' : '-Infinity';
    return Number.isInteger(value) && !Object.is(value, -0) ? String(value) : JSON.stringify(value);
  }
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value).map(([key, item]) => `${JSON.stringify(key)}: ${pythonJson(item)}`);
    return `{${entries.join(', ')}}`;
  }
  return JSON.stringify(String(value));
}

const trailingSpecial = /(?:\s*(?:<\|im_end\|>|<\|endoftext\|>))+\s*$/;

/** Removes trailing `<|im_end|>` / `<|endoftext|>` markers (repeated, whitespace-tolerant). */
export function stripTrailingSpecialTokens(text: string): string {
  return text.replace(trailingSpecial, '');
}

/**
 * Local Qwen3 reasoning split: without `</think>` there is no reasoning; otherwise the reasoning is
 * the text before the first `</think>` (after the last `<think>` before it), trimmed, and the visible
 * text is the rest without leading newlines.
 */
export function splitReasoningLocal(text: string): ReasoningSplit {
  const close = text.indexOf('</think>');
  if (close === -1) return { text, reasoning: null };
  const before = text.slice(0, close);
  const open = before.lastIndexOf('<think>');
  const reasoning = (open === -1 ? before : before.slice(open + '<think>'.length)).trim();
  return {
    text: text.slice(close + '</think>'.length).replace(/^\n+/, ''),
    reasoning: reasoning === '' ? null : reasoning,
  };
}

function parameterValue(raw: string): unknown {
  const value = raw.replace(/^\n/, '').replace(/\n$/, '').trim();
  if (value === '') return '';
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}

function finishContent(remaining: string): string | null {
  const trimmed = remaining.trim();
  return trimmed === '' ? null : trimmed;
}

/**
 * Local parser of the Qwen3.5 XML tool-call format (`<tool_call><function=NAME><parameter=K>V</parameter>…`).
 * Blocks without a complete function stay in the content.
 */
export function parseQwen35ToolCalls(text: string): ToolCallSplit {
  const blockPattern = /<tool_call>([\s\S]*?)<\/tool_call>/g;
  const toolCalls: ExtractedToolCall[] = [];
  let remaining = '';
  let last = 0;
  for (const block of text.matchAll(blockPattern)) {
    const inner = block[1] ?? '';
    const calls: ExtractedToolCall[] = [];
    for (const fn of inner.matchAll(/<function=([^>\n]+)>([\s\S]*?)<\/function>/g)) {
      const args: Record<string, unknown> = {};
      for (const parameter of (fn[2] ?? '').matchAll(/<parameter=([^>\n]+)>([\s\S]*?)<\/parameter>/g)) {
        args[(parameter[1] ?? '').trim()] = parameterValue(parameter[2] ?? '');
      }
      calls.push({
        id: newToolCallId(),
        type: 'function',
        index: 0,
        function: { name: (fn[1] ?? '').trim(), arguments: pythonJson(args) },
      });
    }
    if (calls.length === 0) continue;
    remaining += text.slice(last, block.index);
    last = block.index + block[0].length;
    toolCalls.push(...calls);
  }
  if (toolCalls.length === 0) return { content: text, toolCalls };
  remaining += text.slice(last);
  toolCalls.forEach((call, index) => {
    call.index = index;
  });
  return { content: finishContent(remaining), toolCalls };
}

/** Local parser of the Hermes format: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`. */
export function parseHermesToolCalls(text: string): ToolCallSplit {
  const toolCalls: ExtractedToolCall[] = [];
  let remaining = '';
  let last = 0;
  for (const block of text.matchAll(/<tool_call>([\s\S]*?)<\/tool_call>/g)) {
    let value: unknown;
    try {
      value = JSON.parse((block[1] ?? '').trim());
    } catch {
      continue;
    }
    const record = value as { name?: unknown; arguments?: unknown; parameters?: unknown };
    if (typeof record !== 'object' || record === null || typeof record.name !== 'string') continue;
    const args = record.arguments ?? record.parameters ?? {};
    toolCalls.push({
      id: newToolCallId(),
      type: 'function',
      index: toolCalls.length,
      function: { name: record.name, arguments: typeof args === 'string' ? args : pythonJson(args) },
    });
    remaining += text.slice(last, block.index);
    last = block.index + block[0].length;
  }
  if (toolCalls.length === 0) return { content: text, toolCalls };
  return { content: finishContent(remaining + text.slice(last)), toolCalls };
}

/** Tool-call formats by `--model-tool-call-type`. */
export function localToolCallParser(type: string): ((text: string) => ToolCallSplit) | null {
  if (['qwen3_5', 'qwen3_6', 'qwen3_coder', 'qwen35'].includes(type)) return parseQwen35ToolCalls;
  if (['hermes', 'qwen3', 'qwen25', 'qwen'].includes(type)) return parseHermesToolCalls;
  return null;
}

/** Options of {@link OutputParser}. */
export interface OutputParserOptions {
  engine: EngineClient;
  toolCallType: string;
  toolCallBackend: ParseBackend;
  reasoningType: string;
  reasoningBackend: ParseBackend;
}

/** A fully parsed assistant output. */
export interface ParsedOutput {
  content: string | null;
  reasoning: string | null;
  toolCalls: ExtractedToolCall[];
}

const thinkingTypes = new Set(['qwen3', 'qwen3_5', 'qwen3-thinking']);

/**
 * Reasoning and tool-call parsing with the configured backends (§1.6): `local`, `sglang_api` (the
 * engine's parser endpoints) or `hybrid` (engine first, local when it yields nothing).
 */
export class OutputParser {
  readonly #options: OutputParserOptions;

  constructor(options: OutputParserOptions) {
    this.#options = options;
  }

  /** Splits reasoning, then parses tool calls from the visible text. */
  async parse(rawText: string, tools: readonly Tool[] | null | undefined): Promise<ParsedOutput> {
    const local = this.parseLocally(rawText);
    if (local !== null) return local;
    const text = stripTrailingSpecialTokens(rawText);
    const split = await this.#splitReasoning(text);
    const calls = await this.#parseToolCalls(split.text, tools);
    return this.#finish(split, calls);
  }

  /**
   * {@link parse} without waiting when both backends are local (no engine call), else null. Callers
   * on the hot path use it first: every await is another turn of the event loop.
   */
  parseLocally(rawText: string): ParsedOutput | null {
    if (this.#options.reasoningBackend !== 'local' || this.#options.toolCallBackend !== 'local') return null;
    const text = stripTrailingSpecialTokens(rawText);
    const split = thinkingTypes.has(this.#options.reasoningType)
      ? splitReasoningLocal(text)
      : { text, reasoning: null };
    const local = localToolCallParser(this.#options.toolCallType);
    const calls = normalizeNoCalls(
      local ? local(split.text) : { content: finishContent(split.text), toolCalls: [] },
      split.text,
    );
    return this.#finish(split, calls);
  }

  #finish(split: ReasoningSplit, calls: ToolCallSplit): ParsedOutput {
    let content = calls.content;
    if (content !== null) {
      content = stripTrailingSpecialTokens(content);
      if (content.trim() === '') content = null;
    }
    const reasoning = split.reasoning?.trim() || null;
    return { content, reasoning, toolCalls: calls.toolCalls };
  }

  async #splitReasoning(text: string): Promise<ReasoningSplit> {
    const { reasoningBackend: backend, reasoningType: type } = this.#options;
    const local = thinkingTypes.has(type) ? splitReasoningLocal : null;
    if (backend === 'local') return local ? local(text) : { text, reasoning: null };
    const remote = await this.#remoteReasoning(text, type);
    if (remote) return remote;
    if (backend === 'hybrid' && local) return local(text);
    return { text, reasoning: null };
  }

  async #remoteReasoning(text: string, type: string): Promise<ReasoningSplit | null> {
    let sent = text;
    // The generation prompt already opened <think>, so the output usually lacks it.
    const close = text.indexOf('</think>');
    if (thinkingTypes.has(type) && close !== -1 && !text.slice(0, close).includes('<think>'))
      sent = `<think>${text}`;
    try {
      const answer = await this.#options.engine.separateReasoning({ text: sent, reasoning_parser: type });
      if (!answer) return null;
      const reasoning = answer.reasoning_text ?? answer.reasoning_content;
      return {
        text: answer.text,
        reasoning: typeof reasoning === 'string' && reasoning.trim() !== '' ? reasoning.trim() : null,
      };
    } catch {
      return null;
    }
  }

  async #parseToolCalls(text: string, tools: readonly Tool[] | null | undefined): Promise<ToolCallSplit> {
    const { toolCallBackend: backend, toolCallType: type } = this.#options;
    const local = localToolCallParser(type);
    const runLocal = () => (local ? local(text) : { content: finishContent(text), toolCalls: [] });
    if (backend === 'local') return normalizeNoCalls(runLocal(), text);
    if (tools && tools.length > 0) {
      const remote = await this.#remoteToolCalls(text, tools);
      if (remote) return remote;
    }
    if (backend === 'hybrid') return normalizeNoCalls(runLocal(), text);
    return { content: text, toolCalls: [] };
  }

  async #remoteToolCalls(text: string, tools: readonly Tool[]): Promise<ToolCallSplit | null> {
    try {
      const answer = await this.#options.engine.parseFunctionCall({
        text,
        tool_call_parser: 'qwen3_coder',
        tools,
      });
      if (!answer) return null;
      const toolCalls: ExtractedToolCall[] = [];
      for (const call of answer.calls) {
        if (call?.name === undefined || call.name === '') continue;
        const args = call.parameters ?? call.arguments ?? {};
        toolCalls.push({
          id: newToolCallId(),
          type: 'function',
          index: toolCalls.length,
          function: { name: call.name, arguments: typeof args === 'string' ? args : pythonJson(args) },
        });
      }
      if (toolCalls.length === 0) return null;
      const normal = answer.normal_text ?? '';
      return { content: finishContent(normal), toolCalls };
    } catch {
      return null;
    }
  }
}

function normalizeNoCalls(split: ToolCallSplit, text: string): ToolCallSplit {
  return split.toolCalls.length === 0 ? { content: text, toolCalls: [] } : split;
}
