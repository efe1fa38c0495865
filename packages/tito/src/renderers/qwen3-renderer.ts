import type { ChatMessage, Tool } from '@dressage/protocol';
import { toTemplateJson } from '../json-format.js';
import { messageText } from '../messages.js';
import type { ChatRenderer, RenderOptions } from './renderer.js';
import {
  assertKnownRoles,
  assistantParts,
  continuesAfterAssistant,
  dummySystem,
  dummyToolCaller,
  jsonToolCallBody,
  renderQwenTurns,
  stripCharacters,
  toolCallsOf,
  turnEnd,
  turnStart,
} from './shared.js';

// Our own wording of the tool instructions; the call format it teaches is the model's.
function toolsPreamble(tools: readonly Tool[]): string {
  let text =
    '# Tools\n\nYou can call the functions below to help with the request.\n\n' +
    'Their signatures are listed inside <tools></tools> XML tags:\n<tools>';
  for (const tool of tools) text += `\n${toTemplateJson(tool)}`;
  return (
    `${text}\n</tools>\n\n` +
    'To call a function, reply with a JSON object holding its name and arguments inside <tool_call></tool_call> XML tags:\n' +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
  );
}

function wrapsToolResponse(message: ChatMessage): boolean {
  const text = messageText(message.content);
  return text.startsWith('<tool_response>') && text.endsWith('</tool_response>');
}

// Index of the last real user query: history reasoning before it is dropped when not preserved.
function lastQueryIndex(messages: readonly ChatMessage[]): number {
  for (let index = messages.length - 1; index >= 0; index--) {
    const message = messages[index]!;
    if (message.role === 'user' && !wrapsToolResponse(message)) return index;
  }
  return messages.length - 1;
}

function generationPrompt(options: RenderOptions): string {
  if (!options.addGenerationPrompt) return '';
  return `${turnStart}assistant\n${options.enableThinking === false ? '<think>\n\n</think>\n\n' : ''}`;
}

// An assistant turn; with thinking not preserved, reasoning shows only after the last user query.
function assistantTurn(message: ChatMessage, showsThinking: boolean): string {
  const { reasoning, content } = assistantParts(message);
  let turn = showsThinking
    ? `${turnStart}assistant\n<think>\n${stripCharacters(reasoning, '\n')}\n</think>\n\n${content.replace(/^\n+/, '')}`
    : `${turnStart}assistant\n${content}`;
  const calls = toolCallsOf(message);
  for (let call = 0; call < calls.length; call++) {
    if (call > 0 || content !== '') turn += '\n';
    turn += `<tool_call>\n${jsonToolCallBody(calls[call]!)}\n</tool_call>`;
  }
  return `${turn}${turnEnd}\n`;
}

// The turns of `messages[begin..]` with the reasoning rule of this renderer.
function renderTurns(
  messages: readonly ChatMessage[],
  begin: number,
  preserveThinking: boolean,
  lastQuery: number,
): string {
  return renderQwenTurns(messages, begin, (message, index) =>
    assistantTurn(
      message,
      preserveThinking ||
        (index > lastQuery && (index === messages.length - 1 || assistantParts(message).reasoning !== '')),
    ),
  );
}

/** Options of {@link createQwen3Renderer}. */
export interface Qwen3RendererOptions {
  /**
   * Keep every assistant turn's reasoning (default true, what TITO needs). False drops reasoning
   * before the last user query, as the official Qwen3 template does.
   */
  preserveThinking?: boolean;
}

/**
 * The fixed renderer of the Qwen3 format: ChatML turns, reasoning in `<think>` blocks, JSON tool
 * calls inside `<tool_call>`, tool results as `<tool_response>` blocks inside a user turn.
 */
export function createQwen3Renderer(options: Qwen3RendererOptions = {}): ChatRenderer {
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
        const system = first?.role === 'system' ? `${messageText(first.content)}\n\n` : '';
        parts.push(`${turnStart}system\n${system}${toolsPreamble(tools)}${turnEnd}\n`);
      } else if (first?.role === 'system') {
        parts.push(`${turnStart}system\n${messageText(first.content)}${turnEnd}\n`);
      }
      const lastQuery = preserveThinking ? -1 : lastQueryIndex(messages);
      parts.push(renderTurns(messages, first?.role === 'system' ? 1 : 0, preserveThinking, lastQuery));
      parts.push(generationPrompt(renderOptions));
      return parts.join('');
    },
    // Only while every turn keeps its reasoning: otherwise a new user query changes earlier turns.
    ...(preserveThinking
      ? {
          renderFrom(messages: readonly ChatMessage[], from: number, renderOptions: RenderOptions = {}) {
            if (!continuesAfterAssistant(messages, from)) return null;
            return renderTurns(messages, from, true, -1) + generationPrompt(renderOptions);
          },
        }
      : {}),
    dummyContext(group: readonly ChatMessage[]): ChatMessage[] {
      return group[0]?.role === 'tool' ? [dummySystem, dummyToolCaller(group)] : [dummySystem];
    },
  };
}
