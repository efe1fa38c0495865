import type { ChatMessage } from '@dressage/protocol';
import { messageText } from '../messages.js';
import type { ChatRenderer, RenderOptions } from './renderer.js';
import {
  assertKnownRoles,
  assistantParts,
  continuesAfterAssistant,
  dummySystem,
  dummyToolCaller,
  renderQwenTurns,
  stripCharacters,
  toolCallsOf,
  turnEnd,
  turnStart,
} from './shared.js';
import { type TemplateText, toolCallText, toolsTurnText } from './template-text.js';

function wrapsToolResponse(message: ChatMessage): boolean {
  const text = messageText(message.content);
  return text.startsWith('<tool_response>') && text.endsWith('</tool_response>');
}

// A real user query, not tool results sent as a user turn.
function isQuery(message: ChatMessage): boolean {
  return message.role === 'user' && !wrapsToolResponse(message);
}

// Index of the last real user query: history reasoning before it is dropped when not preserved.
function lastQueryIndex(messages: readonly ChatMessage[]): number {
  for (let index = messages.length - 1; index >= 0; index--) {
    if (isQuery(messages[index]!)) return index;
  }
  return messages.length - 1;
}

/**
 * With reasoning not preserved, where `render(messages)` extends `render(messages.slice(0, from))`
 * (`messages[from - 1]` an assistant turn): a last query index that gives the turns from `from` on
 * their think blocks exactly as the whole render does, or null when an earlier turn renders
 * differently in the longer conversation. An assistant turn after the last query shows its think
 * block when it has reasoning or is the last message, so the earlier text stays put unless
 * - a new query follows `from` while one precedes it: every earlier turn after the old query then
 *   loses its think block (the turn at `from - 1` had one, being last); or
 * - the turn at `from - 1`, after the last query, has no reasoning: its empty think block was there
 *   only while it was last.
 * Without any query before `from`, no earlier turn shows a think block in either render. Reads only
 * roles, contents and the reasoning of `messages[from - 1]`, and scans from the start only up to
 * the first query, so the work is the new messages' (`rendersAlike` compares all of these).
 */
function continuedLastQuery(messages: readonly ChatMessage[], from: number): number | null {
  let newQuery = -1;
  for (let index = messages.length - 1; index >= from && newQuery === -1; index--)
    if (isQuery(messages[index]!)) newQuery = index;
  let queryBefore = false;
  for (let index = 0; index < from - 1 && !queryBefore; index++) queryBefore = isQuery(messages[index]!);
  if (!queryBefore) return newQuery === -1 ? messages.length - 1 : newQuery;
  if (newQuery !== -1 || assistantParts(messages[from - 1]!).reasoning === '') return null;
  // The last query lies before `from - 1`: every turn from `from` on comes after it, as here.
  return from - 1;
}

function generationPrompt(text: TemplateText, options: RenderOptions): string {
  if (!options.addGenerationPrompt) return '';
  return options.enableThinking === false ? text.generationPromptWithoutThinking : text.generationPrompt;
}

// An assistant turn; with thinking not preserved, reasoning shows only after the last user query.
function assistantTurn(text: TemplateText, message: ChatMessage, showsThinking: boolean): string {
  const { reasoning, content } = assistantParts(message);
  let turn = showsThinking
    ? `${turnStart}assistant\n<think>\n${stripCharacters(reasoning, '\n')}\n</think>\n\n${content.replace(/^\n+/, '')}`
    : `${turnStart}assistant\n${content}`;
  const calls = toolCallsOf(message);
  for (let call = 0; call < calls.length; call++) {
    if (call > 0) turn += text.betweenCalls;
    else if (content !== '') turn += text.beforeFirstCall;
    turn += toolCallText(text.toolCall, calls[call]!);
  }
  return `${turn}${turnEnd}\n`;
}

// The turns of `messages[begin..]` with the reasoning rule of this renderer.
function renderTurns(
  text: TemplateText,
  messages: readonly ChatMessage[],
  begin: number,
  preserveThinking: boolean,
  lastQuery: number,
): string {
  return renderQwenTurns(messages, begin, text, plainContent, (message, index) =>
    assistantTurn(
      text,
      message,
      preserveThinking ||
        (index > lastQuery && (index === messages.length - 1 || assistantParts(message).reasoning !== '')),
    ),
  );
}

function plainContent(message: ChatMessage): string {
  return messageText(message.content);
}

/** Options of {@link createQwen3Renderer}. */
export interface Qwen3RendererOptions {
  /**
   * Keep every assistant turn's reasoning (default true, what TITO needs; templates that honour
   * `preserve_thinking` do the same with it set). False drops reasoning before the last user query,
   * as the official Qwen3 template does.
   */
  preserveThinking?: boolean;
}

/**
 * The fixed renderer of the Qwen3 format: ChatML turns, reasoning in `<think>` blocks, JSON tool
 * calls, tool results inside a user turn. Every piece of literal text (tool instructions, call
 * format, result wrapping, generation prompt) is the template's, read by {@link readTemplateText}.
 */
export function createQwen3Renderer(text: TemplateText, options: Qwen3RendererOptions = {}): ChatRenderer {
  const preserveThinking = options.preserveThinking ?? true;
  return {
    name: 'qwen3',
    endOfTurn: turnEnd,
    generationPromptIsContextFree: true,
    render(messages: readonly ChatMessage[], renderOptions: RenderOptions = {}): string {
      assertKnownRoles(messages);
      const parts: string[] = [];
      const first = messages[0];
      const tools = renderOptions.tools ?? [];
      if (tools.length > 0) {
        parts.push(toolsTurnText(text, tools, first?.role === 'system' ? messageText(first.content) : null));
      } else if (first?.role === 'system') {
        parts.push(`${turnStart}system\n${messageText(first.content)}${turnEnd}\n`);
      }
      const lastQuery = preserveThinking ? -1 : lastQueryIndex(messages);
      parts.push(renderTurns(text, messages, first?.role === 'system' ? 1 : 0, preserveThinking, lastQuery));
      parts.push(generationPrompt(text, renderOptions));
      return parts.join('');
    },
    renderFrom(messages: readonly ChatMessage[], from: number, renderOptions: RenderOptions = {}) {
      if (!continuesAfterAssistant(messages, from)) return null;
      if (preserveThinking)
        return renderTurns(text, messages, from, true, -1) + generationPrompt(text, renderOptions);
      const lastQuery = continuedLastQuery(messages, from);
      if (lastQuery === null) return null;
      return renderTurns(text, messages, from, false, lastQuery) + generationPrompt(text, renderOptions);
    },
    dummyContext(group: readonly ChatMessage[]): ChatMessage[] {
      return group[0]?.role === 'tool' ? [dummySystem, dummyToolCaller(group)] : [dummySystem];
    },
  };
}
