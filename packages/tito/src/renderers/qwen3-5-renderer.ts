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
  toolCallsOf,
  turnEnd,
  turnStart,
} from './shared.js';
import { type TemplateText, toolCallText, toolsTurnText } from './template-text.js';

// Qwen3.5 templates trim every message's text (Jinja's `trim`).
function trimmedContent(message: ChatMessage): string {
  return messageText(message.content).trim();
}

function assistantTurn(text: TemplateText, message: ChatMessage): string {
  // Reasoning is split out of the trimmed text, then trimmed itself; it is always kept
  // (preserve_thinking), so every turn reads as the model produced it.
  const { reasoning, content } = assistantParts({ ...message, content: trimmedContent(message) });
  let turn = `${turnStart}assistant\n<think>\n${reasoning.trim()}\n</think>\n\n${content}`;
  const calls = toolCallsOf(message);
  for (let index = 0; index < calls.length; index++) {
    if (index > 0) turn += text.betweenCalls;
    else if (content.trim() !== '') turn += text.beforeFirstCall;
    turn += toolCallText(text.toolCall, calls[index]!);
  }
  return `${turn}${turnEnd}\n`;
}

function generationPrompt(text: TemplateText, options: RenderOptions): string {
  if (!options.addGenerationPrompt) return '';
  return options.enableThinking === false ? text.generationPromptWithoutThinking : text.generationPrompt;
}

/**
 * The fixed renderer of the Qwen3.5/3.6 format, written for TITO: ChatML turns with trimmed text,
 * reasoning always kept as `<think>\n…\n</think>\n\n` (the template's `preserve_thinking`), XML
 * tool calls, tool results inside one user turn per run of consecutive tool messages. Every piece
 * of literal text (tool instructions, call format, result wrapping, generation prompt) is the
 * template's, read by {@link readTemplateText}.
 */
export function createQwen35Renderer(text: TemplateText): ChatRenderer {
  const turn = (message: ChatMessage) => assistantTurn(text, message);
  return {
    name: 'qwen3_5',
    endOfTurn: turnEnd,
    generationPromptIsContextFree: true,
    render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
      assertKnownRoles(messages);
      let rendered = '';
      let start = 0;
      const first = messages[0];
      const tools = options.tools ?? [];
      if (tools.length > 0) {
        // The system text joins the tools turn only when it is not empty once trimmed.
        const system = first?.role === 'system' ? trimmedContent(first) : '';
        if (first?.role === 'system') start = 1;
        rendered = toolsTurnText(text, tools, system === '' ? null : system);
      }
      return (
        rendered +
        renderQwenTurns(messages, start, text, trimmedContent, turn) +
        generationPrompt(text, options)
      );
    },
    renderFrom(messages: readonly ChatMessage[], from: number, options: RenderOptions = {}): string | null {
      if (!continuesAfterAssistant(messages, from)) return null;
      return renderQwenTurns(messages, from, text, trimmedContent, turn) + generationPrompt(text, options);
    },
    dummyContext(group: readonly ChatMessage[]): ChatMessage[] {
      return group[0]?.role === 'tool' ? [dummySystem, dummyToolCaller(group)] : [dummySystem];
    },
  };
}
