import { DressageError } from '@dressage/protocol';
import { createChatTemplateRenderer } from '../chat-template-renderer.js';
import { createChatmlRenderer } from './chatml-renderer.js';
import { createQwen35Renderer } from './qwen3-5-renderer.js';
import { createQwen3Renderer } from './qwen3-renderer.js';
import type { ChatRenderer, RendererFamily } from './renderer.js';
import { rendererFamilies } from './renderer.js';
import { assertRendersLikeTemplate } from './template-check.js';
import { readTemplateText } from './template-text.js';

/** The template in force that a fixed renderer takes its text from and is checked against. */
export interface FixedRendererOptions {
  /** The Jinja chat template in force (the model directory's, or one given to replace it). */
  chatTemplate: string;
  /** A name for the template in errors, e.g. its path. */
  templateName?: string;
  /** `bos_token` seen by the template. */
  bosToken?: string | null;
  /** `eos_token` seen by the template. */
  eosToken?: string | null;
}

// Whether the template keeps reasoning before the last user query when asked to.
function honoursPreserveThinking(template: ChatRenderer): boolean {
  return template
    .render([
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'answer', reasoning_content: 'probe kept reasoning' },
      { role: 'user', content: 'second' },
    ])
    .includes('probe kept reasoning');
}

/**
 * The fixed renderer of a model family, with its literal text (tool instructions, tool-call format,
 * tool-result wrapping, generation prompt) read from the template in force, then checked against
 * that template on conversations with tools, calls, results and reasoning. Templates that honour
 * `preserve_thinking` are rendered with it set, as TITO needs every turn to keep its reasoning
 * (`qwen3_5` always keeps it; `qwen3` keeps it only when the template does). `chatml` is a generic
 * format of its own for models without a template, and is not checked.
 *
 * @throws DressageError `invalid_argument` for an unknown family or a template that does not parse;
 *   `failed_precondition` naming the family, the template and the first differing text when the
 *   renderer cannot reproduce the template.
 */
export function createFixedRenderer(family: RendererFamily, options: FixedRendererOptions): ChatRenderer {
  if (family === 'chatml') return createChatmlRenderer();
  if (family !== 'qwen3_5' && family !== 'qwen3') {
    throw new DressageError({
      code: 'invalid_argument',
      message: `Unknown renderer family ${JSON.stringify(family)}; expected one of ${rendererFamilies.join(', ')}`,
      details: { family },
    });
  }
  const templateName = options.templateName ?? null;
  const label = templateName === null ? 'the chat template' : `the chat template ${templateName}`;
  const tokens = { bosToken: options.bosToken ?? null, eosToken: options.eosToken ?? null };
  const preserving = createChatTemplateRenderer(options.chatTemplate, {
    ...tokens,
    variables: { preserve_thinking: true },
  });
  const preserves = honoursPreserveThinking(preserving);
  const template = preserves ? preserving : createChatTemplateRenderer(options.chatTemplate, tokens);
  let renderer: ChatRenderer;
  try {
    const text = readTemplateText(template, family === 'qwen3_5' ? 'xml' : 'json');
    renderer =
      family === 'qwen3_5'
        ? createQwen35Renderer(text)
        : createQwen3Renderer(text, { preserveThinking: preserves });
  } catch (error) {
    if (!DressageError.isInstance(error) || error.code !== 'failed_precondition') throw error;
    throw new DressageError({
      code: 'failed_precondition',
      message: `The ${family} renderer cannot reproduce ${label}: ${error.message}`,
      cause: error,
      details: { renderer: family, template: templateName, ...error.details },
    });
  }
  assertRendersLikeTemplate(renderer, template, label, templateName);
  return renderer;
}

/**
 * Guesses the renderer family from a chat template: XML parameters mean `qwen3_5`, JSON calls in
 * `<tool_call>` mean `qwen3`, other ChatML templates `chatml`; null when it is not ChatML at all.
 */
export function inferRendererFamily(chatTemplate: string | null): RendererFamily | null {
  if (chatTemplate === null || !chatTemplate.includes('<|im_start|>')) return null;
  if (chatTemplate.includes('<function=') && chatTemplate.includes('<parameter=')) return 'qwen3_5';
  if (chatTemplate.includes('<tool_call>')) return 'qwen3';
  return 'chatml';
}
