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
  toolCallsOf,
  turnEnd,
  turnStart,
} from './shared.js';

function toolsPreamble(tools: readonly Tool[]): string {
  let text = '# Tools\n\nFunctions you can call, one JSON signature per line:\n<tools>';
  for (const tool of tools) text += `\n${toTemplateJson(tool)}`;
  return `${text}\n</tools>\n\nCall one by replying with <tool_call>{"name": ..., "arguments": {...}}</tool_call>.`;
}

function assistantBody(message: ChatMessage): string {
  const { reasoning, content } = assistantParts(message);
  const trimmed = reasoning.trim();
  let text = trimmed === '' ? content : `<think>\n${trimmed}\n</think>\n\n${content}`;
  const calls = toolCallsOf(message);
  for (let index = 0; index < calls.length; index++) {
    if (index > 0 || text !== '') text += '\n';
    text += `<tool_call>\n${jsonToolCallBody(calls[index]!)}\n</tool_call>`;
  }
  return text;
}

function renderTurns(messages: readonly ChatMessage[], begin: number): string {
  let text = '';
  for (let index = begin; index < messages.length; index++) {
    const message = messages[index]!;
    const body = message.role === 'assistant' ? assistantBody(message) : messageText(message.content);
    text += `${turnStart}${message.role}\n${body}${turnEnd}\n`;
  }
  return text;
}

/**
 * A generic ChatML renderer: every message is `<|im_start|>{role}\n{content}<|im_end|>\n`, tool
 * results keep the `tool` role (one turn each), reasoning is shown only when present, and tools
 * are listed as JSON in the system turn. For models that speak ChatML without a family format.
 */
export function createChatmlRenderer(): ChatRenderer {
  return {
    name: 'chatml',
    endOfTurn: turnEnd,
    generationPromptIsContextFree: true,
    render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
      assertKnownRoles(messages);
      const parts: string[] = [];
      let start = 0;
      const tools = options.tools ?? [];
      if (tools.length > 0) {
        const first = messages[0];
        const system = first?.role === 'system' ? `${messageText(first.content)}\n\n` : '';
        if (first?.role === 'system') start = 1;
        parts.push(`${turnStart}system\n${system}${toolsPreamble(tools)}${turnEnd}\n`);
      }
      parts.push(renderTurns(messages, start));
      if (options.addGenerationPrompt) parts.push(`${turnStart}assistant\n`);
      return parts.join('');
    },
    renderFrom(messages: readonly ChatMessage[], from: number, options: RenderOptions = {}): string | null {
      if (!continuesAfterAssistant(messages, from)) return null;
      return renderTurns(messages, from) + (options.addGenerationPrompt ? `${turnStart}assistant\n` : '');
    },
    dummyContext(group: readonly ChatMessage[]): ChatMessage[] {
      return group[0]?.role === 'tool' ? [dummySystem, dummyToolCaller(group)] : [dummySystem];
    },
  };
}
