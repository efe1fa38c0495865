import { type ChatMessage, DressageError } from '@dressage/protocol';
import { Template } from '@huggingface/jinja';
import { messageText, toolCallArguments } from './messages.js';
import type { ChatRenderer, RenderOptions } from './renderers/renderer.js';
import { assertKnownRoles, dummySystem, dummyToolCaller } from './renderers/shared.js';
import type { TitoTokenizer } from './tokenizer.js';

/** Options of {@link createChatTemplateRenderer}. */
export interface ChatTemplateRendererOptions {
  /** `bos_token` seen by the template. Default `""`. */
  bosToken?: string | null;
  /** `eos_token` seen by the template, and the turn end TITO looks for. Default `<|im_end|>`. */
  eosToken?: string | null;
  /**
   * Decode JSON-string tool call arguments to objects before rendering, as serving engines do
   * (templates that iterate over arguments need a mapping). Default true.
   */
  parseToolArguments?: boolean;
  /** Extra template variables, e.g. `{ preserve_thinking: true }`. */
  variables?: Record<string, unknown>;
}

// Templates index into messages with Python semantics: content must be a string, and arguments a
// mapping where the template iterates over them.
function templateMessage(message: ChatMessage, parseToolArguments: boolean): Record<string, unknown> {
  const prepared: Record<string, unknown> = { ...message, content: messageText(message.content) };
  if (message.role === 'assistant' && message.tool_calls) {
    prepared.tool_calls = message.tool_calls.map((call) => ({
      ...call,
      function: {
        ...call.function,
        arguments: parseToolArguments ? toolCallArguments(call) : call.function.arguments,
      },
    }));
  }
  return prepared;
}

/**
 * Renders with a model's own Jinja chat template (the snapshot path): the exact text the serving
 * engine would build, for tools, tool calls, tool results, `reasoning_content`,
 * `add_generation_prompt` and `enable_thinking`. Message content parts are joined to text and null
 * content becomes `""` (templates cannot index a list or None).
 *
 * @throws DressageError `invalid_argument` when the template does not parse.
 */
export function createChatTemplateRenderer(
  template: string,
  options: ChatTemplateRendererOptions = {},
): ChatRenderer {
  let compiled: Template;
  try {
    compiled = new Template(template);
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `The chat template does not parse: ${(error as Error).message}`,
      cause: error,
    });
  }
  const parseToolArguments = options.parseToolArguments ?? true;
  const endOfTurn = options.eosToken ?? '<|im_end|>';
  return {
    name: 'chat_template',
    endOfTurn,
    generationPromptIsContextFree: false,
    render(messages: readonly ChatMessage[], renderOptions: RenderOptions = {}): string {
      assertKnownRoles(messages);
      const variables: Record<string, unknown> = {
        ...options.variables,
        messages: messages.map((message) => templateMessage(message, parseToolArguments)),
        add_generation_prompt: renderOptions.addGenerationPrompt ?? false,
        bos_token: options.bosToken ?? '',
        eos_token: endOfTurn,
      };
      if (renderOptions.tools !== undefined && renderOptions.tools !== null)
        variables.tools = renderOptions.tools;
      if (renderOptions.enableThinking !== undefined)
        variables.enable_thinking = renderOptions.enableThinking;
      try {
        return compiled.render(variables);
      } catch (error) {
        throw new DressageError({
          code: 'invalid_argument',
          message: `The chat template failed to render: ${(error as Error).message}`,
          cause: error,
        });
      }
    },
    dummyContext(group: readonly ChatMessage[]): ChatMessage[] {
      return group[0]?.role === 'tool' ? [dummySystem, dummyToolCaller(group)] : [dummySystem];
    },
  };
}

/**
 * The snapshot renderer of a loaded tokenizer: the template in force (its own chat template, or
 * `options.chatTemplate` given to replace it), with its special tokens.
 *
 * @throws DressageError `failed_precondition` when the model ships no chat template and none is given.
 */
export function createSnapshotRenderer(
  tokenizer: TitoTokenizer,
  options: Omit<ChatTemplateRendererOptions, 'bosToken' | 'eosToken'> & { chatTemplate?: string } = {},
): ChatRenderer {
  const { chatTemplate = tokenizer.chatTemplate, ...rest } = options;
  if (chatTemplate === null) {
    throw new DressageError({
      code: 'failed_precondition',
      message: `${tokenizer.files.directory} has no chat template (tokenizer_config.json chat_template or chat_template.jinja)`,
      details: { path: tokenizer.files.directory },
    });
  }
  return createChatTemplateRenderer(chatTemplate, {
    ...rest,
    bosToken: tokenizer.bosToken,
    eosToken: tokenizer.eosToken,
  });
}
