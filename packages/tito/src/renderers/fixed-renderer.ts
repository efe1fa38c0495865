import { DressageError } from '@dressage/protocol';
import { createChatmlRenderer } from './chatml-renderer.js';
import { createQwen35Renderer } from './qwen3-5-renderer.js';
import { createQwen3Renderer, type Qwen3RendererOptions } from './qwen3-renderer.js';
import { type ChatRenderer, type RendererFamily, rendererFamilies } from './renderer.js';

/**
 * The fixed renderer of a model family.
 *
 * @throws DressageError `invalid_argument` for an unknown family.
 */
export function createFixedRenderer(
  family: RendererFamily,
  options: Qwen3RendererOptions = {},
): ChatRenderer {
  switch (family) {
    case 'qwen3_5':
      return createQwen35Renderer();
    case 'qwen3':
      return createQwen3Renderer(options);
    case 'chatml':
      return createChatmlRenderer();
    default:
      throw new DressageError({
        code: 'invalid_argument',
        message: `Unknown renderer family ${JSON.stringify(family)}; expected one of ${rendererFamilies.join(', ')}`,
        details: { family },
      });
  }
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
