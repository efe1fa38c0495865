import { type ChatMessage, DressageError, type ToolCall } from '@dressage/protocol';
import { TitoIncrementalError } from '../errors.js';
import { toTemplateJson } from '../json-format.js';
import { messageText } from '../messages.js';
import { type TemplateText, toolResultText } from './template-text.js';

/** ChatML turn delimiters, shared by every Qwen family. */
export const turnStart = '<|im_start|>';
export const turnEnd = '<|im_end|>';

const knownRoles = new Set(['system', 'user', 'assistant', 'tool']);

/** Throws a typed error for a role no renderer knows (messages built without the schema). */
export function assertKnownRoles(messages: readonly ChatMessage[], from = 0): void {
  for (let index = from; index < messages.length; index++) {
    const role = (messages[index] as { role?: unknown }).role;
    if (typeof role !== 'string' || !knownRoles.has(role)) {
      throw new TitoIncrementalError({
        reason: 'unknown_role',
        code: 'invalid_argument',
        message: `Message ${index} has role ${JSON.stringify(role)}; expected system, user, assistant or tool`,
        details: { index, role },
      });
    }
  }
}

/**
 * Whether a fixed renderer's `renderFrom` can continue at `from`: only right after an assistant
 * turn (a tools turn merges a system message at index 0 only, and a tool run cannot straddle an
 * assistant message). Checks the roles of the messages it will render.
 */
export function continuesAfterAssistant(messages: readonly ChatMessage[], from: number): boolean {
  if (from < 1 || from > messages.length || messages[from - 1]!.role !== 'assistant') return false;
  assertKnownRoles(messages, from);
  return true;
}

/**
 * The turns of `messages[begin..]` in the Qwen formats: system and user turns, tool results inside
 * user turns in the template's wrapping (a tool message looks at its neighbours, hence the whole
 * list), and assistant turns as `assistantTurn` writes them. `contentOf` gives a message's text as
 * the template writes it (some templates trim it).
 */
export function renderQwenTurns(
  messages: readonly ChatMessage[],
  begin: number,
  text: TemplateText,
  contentOf: (message: ChatMessage) => string,
  assistantTurn: (message: ChatMessage, index: number) => string,
): string {
  let rendered = '';
  for (let index = begin; index < messages.length; index++) {
    const message = messages[index]!;
    switch (message.role) {
      case 'system':
      case 'user':
        rendered += `${turnStart}${message.role}\n${contentOf(message)}${turnEnd}\n`;
        break;
      case 'assistant':
        rendered += assistantTurn(message, index);
        break;
      case 'tool':
        rendered += toolResultText(
          text,
          messages[index - 1]?.role !== 'tool',
          contentOf(message),
          messages[index + 1]?.role !== 'tool',
        );
        break;
    }
  }
  return rendered;
}

/** An assistant message split into reasoning and visible content. */
export interface AssistantParts {
  reasoning: string;
  content: string;
}

/**
 * Reasoning and content of an assistant message. Without `reasoning_content`, a `</think>` inside
 * the content splits them (what Qwen templates do with raw model text).
 */
export function assistantParts(message: ChatMessage): AssistantParts {
  const content = messageText(message.content);
  const reasoning = (message as { reasoning_content?: unknown }).reasoning_content;
  if (typeof reasoning === 'string') return { reasoning, content };
  const close = content.indexOf('</think>');
  if (close === -1) return { reasoning: '', content };
  const before = content.slice(0, close).replace(/\n+$/, '');
  const open = before.lastIndexOf('<think>');
  return {
    reasoning: (open === -1 ? before : before.slice(open + '<think>'.length)).replace(/^\n+/, ''),
    content: content.slice(content.lastIndexOf('</think>') + '</think>'.length).replace(/^\n+/, ''),
  };
}

/** Strips `characters` from both ends (Python's `str.strip(chars)`). */
export function stripCharacters(text: string, characters: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && characters.includes(text[start]!)) start++;
  while (end > start && characters.includes(text[end - 1]!)) end--;
  return text.slice(start, end);
}

/** The tool calls of an assistant message (empty for other roles). */
export function toolCallsOf(message: ChatMessage): readonly ToolCall[] {
  return message.role === 'assistant' ? (message.tool_calls ?? []) : [];
}

/** `{"name": …, "arguments": …}` of a JSON-style tool call; string arguments are written as given. */
export function jsonToolCallBody(call: ToolCall): string {
  const raw = call.function.arguments;
  const argumentsText = typeof raw === 'string' ? raw : toTemplateJson(raw);
  return `{"name": "${call.function.name}", "arguments": ${argumentsText}}`;
}

/** A dummy assistant turn that calls one tool per tool message of `group` (TITO diff context). */
export function dummyToolCaller(group: readonly ChatMessage[]): ChatMessage {
  return {
    role: 'assistant',
    content: '',
    reasoning_content: ' ',
    tool_calls: group.map((message, index) => ({
      id: (message as { tool_call_id?: string }).tool_call_id ?? `call_dummy_${index}`,
      type: 'function' as const,
      function: { name: message.name ?? 'dummy_tool', arguments: '{}' },
    })),
  };
}

/** The system message of every dummy context. */
export const dummySystem: ChatMessage = { role: 'system', content: 'dummy system' };

/** A typed error for tool call arguments a per-parameter format cannot show. */
export function argumentsNotAnObject(call: ToolCall): DressageError {
  return new DressageError({
    code: 'invalid_argument',
    message: `Arguments of tool call ${call.function.name} are not a JSON object, so they cannot be rendered as parameters`,
    details: { tool: call.function.name },
  });
}
