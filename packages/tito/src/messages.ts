import { createHash } from 'node:crypto';
import type { ChatMessage, Tool, ToolCall } from '@dressage/protocol';
import { toCanonicalJson } from './json-format.js';

/** The message text a template sees: a string as is, the text parts of a part list joined, `""` for none. */
export function messageText(content: ChatMessage['content'] | null | undefined): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  let text = '';
  for (const part of content) {
    if (part.type === 'text' && typeof part.text === 'string') text += part.text;
  }
  return text;
}

/**
 * A tool call's arguments as a value: a JSON string is decoded (as serving engines do before
 * templating), anything that is not valid JSON stays the raw string.
 */
export function toolCallArguments(toolCall: ToolCall): unknown {
  const raw = toolCall.function.arguments;
  if (typeof raw !== 'string') return raw;
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** A tool call reduced to what a comparison looks at. */
export interface NormalizedToolCall {
  id: string;
  type: string;
  function: { name: string; arguments: string };
}

/** A message reduced to what routing compares (§1.7 of the reference). */
export interface NormalizedMessage {
  role: string;
  content: string | null;
  name?: string;
  reasoning_content?: string;
  tool_call_id?: string;
  tool_calls?: NormalizedToolCall[];
}

// Agents such as OpenClaw rewrite call ids to alphanumerics, so ids compare in that form.
function sanitizeId(id: string | undefined): string {
  return (id ?? '').replace(/[^A-Za-z0-9]/g, '');
}

// Fields of one role read from a message of any role: absent where its role has none.
interface RoleFields {
  role: string;
  reasoning_content?: unknown;
  tool_call_id?: unknown;
}

/**
 * Normalises one message for comparisons: content `""` becomes null when the message has tool calls,
 * reasoning is trimmed (dropped when empty), ids lose every non-alphanumeric character, and tool
 * call arguments become canonical JSON (sorted keys, compact). The `index` of a tool call is ignored.
 */
export function normalizeMessage(message: ChatMessage): NormalizedMessage {
  const record: RoleFields = message;
  const toolCalls = message.role === 'assistant' ? (message.tool_calls ?? []) : [];
  const text =
    message.content === null || message.content === undefined ? null : messageText(message.content);
  const normalized: NormalizedMessage = {
    role: message.role,
    content: text === '' && toolCalls.length > 0 ? null : text,
  };
  if (typeof message.name === 'string') normalized.name = message.name;
  const reasoning = typeof record.reasoning_content === 'string' ? record.reasoning_content.trim() : '';
  if (reasoning !== '') normalized.reasoning_content = reasoning;
  if (message.role === 'tool' && message.tool_call_id !== undefined) {
    normalized.tool_call_id = sanitizeId(message.tool_call_id);
  }
  if (toolCalls.length > 0) {
    normalized.tool_calls = toolCalls.map((call) => ({
      id: sanitizeId(call.id),
      type: call.type ?? 'function',
      function: { name: call.function.name, arguments: toCanonicalJson(toolCallArguments(call)) },
    }));
  }
  return normalized;
}

/** Normalises every message (see {@link normalizeMessage}). */
export function normalizeMessages(messages: readonly ChatMessage[]): NormalizedMessage[] {
  return messages.map(normalizeMessage);
}

/** Which fields a message comparison looks at. */
export type MessageComparison =
  /** Every normalised field (routing, §1.7). */
  | 'all'
  /** Role, content, reasoning and tool calls only (the TITO append-only check, §1.9). */
  | 'content';

/** True when two normalised messages are equal under the chosen comparison. */
export function normalizedMessagesEqual(
  left: NormalizedMessage,
  right: NormalizedMessage,
  comparison: MessageComparison = 'all',
): boolean {
  if (left.role !== right.role || left.content !== right.content) return false;
  if (left.reasoning_content !== right.reasoning_content) return false;
  if (!toolCallsEqual(left.tool_calls, right.tool_calls)) return false;
  if (comparison === 'content') return true;
  return left.name === right.name && left.tool_call_id === right.tool_call_id;
}

function toolCallsEqual(
  left: NormalizedToolCall[] | undefined,
  right: NormalizedToolCall[] | undefined,
): boolean {
  const leftCalls = left ?? [];
  const rightCalls = right ?? [];
  if (leftCalls.length !== rightCalls.length) return false;
  for (let index = 0; index < leftCalls.length; index++) {
    const a = leftCalls[index]!;
    const b = rightCalls[index]!;
    if (
      a.id !== b.id ||
      a.type !== b.type ||
      a.function.name !== b.function.name ||
      a.function.arguments !== b.function.arguments
    ) {
      return false;
    }
  }
  return true;
}

/**
 * True when `base` is a message-prefix of `messages` after normalisation: the request keeps every
 * earlier message unchanged and only appends. An empty base is a prefix of anything.
 */
export function isMessagePrefix(
  base: readonly ChatMessage[],
  messages: readonly ChatMessage[],
  comparison: MessageComparison = 'all',
): boolean {
  return firstMismatch(base, messages, comparison) === -1;
}

/**
 * The index of the first base message that the request does not repeat, or -1 when `base` is a
 * message-prefix of `messages`.
 */
export function firstMismatch(
  base: readonly ChatMessage[],
  messages: readonly ChatMessage[],
  comparison: MessageComparison = 'all',
): number {
  if (messages.length < base.length) return Math.min(messages.length, base.length - 1);
  for (let index = 0; index < base.length; index++) {
    const left = base[index]!;
    const right = messages[index]!;
    // Most repeated messages are byte-identical copies: settle those without normalising.
    if (left === right || rawEqual(left, right, comparison)) continue;
    if (!normalizedMessagesEqual(normalizeMessage(left), normalizeMessage(right), comparison)) return index;
  }
  return -1;
}

// True when both messages carry the same tool calls as sent, arguments as identical strings.
function toolCallsSentAlike(left: ChatMessage, right: ChatMessage): boolean {
  const leftCalls = toolCallsOf(left);
  const rightCalls = toolCallsOf(right);
  if (leftCalls.length !== rightCalls.length) return false;
  for (let index = 0; index < leftCalls.length; index++) {
    const a = leftCalls[index]!;
    const b = rightCalls[index]!;
    if (
      a.id !== b.id ||
      (a.type ?? 'function') !== (b.type ?? 'function') ||
      a.function.name !== b.function.name ||
      typeof a.function.arguments !== 'string' ||
      a.function.arguments !== b.function.arguments
    ) {
      return false;
    }
  }
  return true;
}

// True when the fields a comparison reads are identical as sent (a sufficient, not necessary,
// condition for equality after normalisation).
function rawEqual(left: ChatMessage, right: ChatMessage, comparison: MessageComparison): boolean {
  if (left.role !== right.role || typeof left.content !== 'string' || left.content !== right.content)
    return false;
  const leftRecord: RoleFields = left;
  const rightRecord: RoleFields = right;
  if (leftRecord.reasoning_content !== rightRecord.reasoning_content) return false;
  if (
    comparison === 'all' &&
    (left.name !== right.name || leftRecord.tool_call_id !== rightRecord.tool_call_id)
  ) {
    return false;
  }
  return toolCallsSentAlike(left, right);
}

/**
 * True when two messages are identical as sent in every field a fixed renderer reads: role, text
 * content (or both without content), reasoning, name, tool call id and tool calls with their
 * arguments as strings. Stricter than {@link normalizedMessagesEqual}: equal messages render to
 * the same text, so a render of one can stand for a render of the other
 * ({@link ChatRenderer.renderFrom}).
 */
export function rendersAlike(left: ChatMessage, right: ChatMessage): boolean {
  if (left === right) return true;
  if (left.role !== right.role) return false;
  const leftContent = left.content ?? null;
  const rightContent = right.content ?? null;
  if (leftContent !== rightContent || (leftContent !== null && typeof leftContent !== 'string')) return false;
  const leftRecord: RoleFields = left;
  const rightRecord: RoleFields = right;
  if (
    leftRecord.reasoning_content !== rightRecord.reasoning_content ||
    left.name !== right.name ||
    leftRecord.tool_call_id !== rightRecord.tool_call_id
  ) {
    return false;
  }
  return toolCallsSentAlike(left, right);
}

function toolCallsOf(message: ChatMessage): readonly ToolCall[] {
  return message.role === 'assistant' ? (message.tool_calls ?? []) : [];
}

/**
 * Canonical JSON of a tool list (sorted keys, compact). `null`, `undefined` and `[]` stay distinct:
 * whether "no tools" and "empty tools" render alike depends on the template
 * (see `rendersNoToolsLikeEmptyTools`).
 */
export function canonicalToolsJson(tools: readonly Tool[] | null | undefined): string {
  return tools === undefined ? 'null' : toCanonicalJson(tools);
}

/** SHA-256 (hex) of {@link canonicalToolsJson}: the `snapshot_tools_hash` of a step. */
export function toolsHash(tools: readonly Tool[] | null | undefined): string {
  return createHash('sha256').update(canonicalToolsJson(tools)).digest('hex');
}
