import type { ChatMessage, Tool, ToolCall } from '@dressage/protocol';
import { toTemplateJson } from '../json-format.js';
import { messageText, toolCallArguments } from '../messages.js';
import type { ChatRenderer, RenderOptions } from './renderer.js';
import {
  argumentsNotAnObject,
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

// Our own wording of the tool instructions; the call format it teaches is the model's.
function toolsPreamble(tools: readonly Tool[]): string {
  let text = '# Tools\n\nYou can call the following functions:\n\n<tools>';
  for (const tool of tools) text += `\n${toTemplateJson(tool)}`;
  text +=
    '\n</tools>\n\n' +
    'To call a function, reply with a block in exactly this format and nothing after it:\n\n' +
    '<tool_call>\n<function=function_name>\n<parameter=parameter_name>\nvalue\n</parameter>\n</function>\n</tool_call>';
  return text;
}

function parameterValue(value: unknown): string {
  if (typeof value === 'string') return value;
  // Objects and arrays as template JSON; scalars as JSON too (`true`, `null`), so that the local
  // parser's JSON decoding gives back the same value.
  return toTemplateJson(value);
}

function xmlToolCall(call: ToolCall): string {
  const values = toolCallArguments(call);
  if (typeof values !== 'object' || values === null || Array.isArray(values))
    throw argumentsNotAnObject(call);
  let text = `<tool_call>\n<function=${call.function.name}>\n`;
  for (const [key, value] of Object.entries(values)) {
    if (value === undefined) continue;
    text += `<parameter=${key}>\n${parameterValue(value)}\n</parameter>\n`;
  }
  return `${text}</function>\n</tool_call>`;
}

function assistantTurn(message: ChatMessage): string {
  const { reasoning, content } = assistantParts(message);
  // Reasoning is always kept (preserve_thinking), so every turn reads as the model produced it.
  const visible = stripCharacters(content, '\n');
  let text = `${turnStart}assistant\n<think>\n${reasoning.trim()}\n</think>\n\n${visible}`;
  const calls = toolCallsOf(message);
  for (let index = 0; index < calls.length; index++) {
    // A blank line parts visible text from the first call; calls are one per line.
    if (index > 0) text += '\n';
    else if (visible !== '') text += '\n\n';
    text += xmlToolCall(calls[index]!);
  }
  return `${text}${turnEnd}\n`;
}

function generationPrompt(options: RenderOptions): string {
  if (!options.addGenerationPrompt) return '';
  return `${turnStart}assistant\n<think>\n${options.enableThinking === false ? '\n</think>\n\n' : ''}`;
}

/**
 * The fixed renderer of the Qwen3.5/3.6 format, written for TITO: ChatML turns, reasoning always
 * kept as `<think>\n…\n</think>\n\n`, XML tool calls, and tool results as `<tool_response>` blocks
 * inside one user turn per run of consecutive tool messages.
 */
export function createQwen35Renderer(): ChatRenderer {
  return {
    name: 'qwen3_5',
    endOfTurn: turnEnd,
    generationPromptIsContextFree: true,
    render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
      assertKnownRoles(messages);
      let text = '';
      let start = 0;
      const first = messages[0];
      const tools = options.tools ?? [];
      if (tools.length > 0) {
        text = `${turnStart}system\n${toolsPreamble(tools)}`;
        if (first?.role === 'system') {
          const content = messageText(first.content);
          if (content !== '') text += `\n\n${content}`;
          start = 1;
        }
        text += `${turnEnd}\n`;
      }
      return text + renderQwenTurns(messages, start, assistantTurn) + generationPrompt(options);
    },
    renderFrom(messages: readonly ChatMessage[], from: number, options: RenderOptions = {}): string | null {
      if (!continuesAfterAssistant(messages, from)) return null;
      return renderQwenTurns(messages, from, assistantTurn) + generationPrompt(options);
    },
    dummyContext(group: readonly ChatMessage[]): ChatMessage[] {
      return group[0]?.role === 'tool' ? [dummySystem, dummyToolCaller(group)] : [dummySystem];
    },
  };
}
