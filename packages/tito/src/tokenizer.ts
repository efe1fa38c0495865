import { DressageError } from '@dressage/protocol';
import { Tokenizer } from '@huggingface/tokenizers';
import { createFastEncoder } from './fast-encoder.js';
import { type ModelFiles, readModelFiles } from './model-directory.js';
import { acceleratePreTokenizer } from './pre-tokenizer.js';

function tokenContent(value: unknown): string | null {
  if (typeof value === 'string') return value;
  if (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { content?: unknown }).content === 'string'
  ) {
    return (value as { content: string }).content;
  }
  return null;
}

// Texts whose ids must not change when the pre-tokenizer is accelerated: ASCII words, numbers,
// whitespace runs, special-token text, non-ASCII letters, emoji and a lone surrogate.
const preTokenizerProbes = [
  "Hello world, it's 2024: 12345 items\tand\nnew lines\r\n  indented   text",
  '<|im_start|>user\nStep 3: continue with {"a": [1, 2.5, null]}.<|im_end|>\n',
  'naïve café — 漢字とかなカナ 😀 Ωμέγα \ud800 end',
  "\u0000\u007f~!@#$%^&*()_+`-=[]\\;',./<>?",
];

// The fast encoder, if the tokenizer's layout is one it implements and it gives the library's ids
// on every probe text.
function checkedFastEncoder(tokenizer: Tokenizer): ((text: string) => Int32Array) | null {
  const fast = createFastEncoder(tokenizer);
  if (fast === null) return null;
  const library = (text: string) => tokenizer.encode(text, { add_special_tokens: false }).ids.join(',');
  try {
    for (const probe of preTokenizerProbes) if (fast(probe).join(',') !== library(probe)) return null;
  } catch {
    return null;
  }
  return fast;
}

/**
 * A Hugging Face tokenizer loaded from a model directory, with token ids in typed arrays.
 * Encoding never adds special tokens: chat templates write them as text.
 */
export class TitoTokenizer {
  /** The files the tokenizer was built from. */
  readonly files: ModelFiles;
  /** The model's own chat template, or null when it ships none. */
  readonly chatTemplate: string | null;
  /** The end-of-sequence token text (`eos_token` of the config), or null. */
  readonly eosToken: string | null;
  /** The beginning-of-sequence token text (`bos_token` of the config), or null. */
  readonly bosToken: string | null;
  readonly #tokenizer: Tokenizer;
  readonly #specialTokens: ReadonlyMap<string, number>;
  readonly #fastEncode: ((text: string) => Int32Array) | null;

  constructor(files: ModelFiles) {
    this.files = files;
    this.chatTemplate = files.chatTemplate;
    this.eosToken = tokenContent(files.tokenizerConfig.eos_token);
    this.bosToken = tokenContent(files.tokenizerConfig.bos_token);
    try {
      this.#tokenizer = new Tokenizer(files.tokenizerJson, files.tokenizerConfig);
    } catch (error) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `Cannot build a tokenizer from ${files.directory}: ${(error as Error).message}`,
        cause: error,
        details: { path: files.directory },
      });
    }
    // Pre-tokenization is most of the cost of short encodes; the faster path is checked on probes.
    const tokenizer = this.#tokenizer;
    acceleratePreTokenizer(
      tokenizer,
      (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
      preTokenizerProbes,
    );
    this.#fastEncode = checkedFastEncoder(tokenizer);
    const special = new Map<string, number>();
    const added = files.tokenizerJson.added_tokens;
    if (Array.isArray(added)) {
      for (const token of added as Array<{ id?: unknown; content?: unknown; special?: unknown }>) {
        if (token.special === true && typeof token.content === 'string' && typeof token.id === 'number') {
          special.set(token.content, token.id);
        }
      }
    }
    this.#specialTokens = special;
  }

  /** Special tokens (added tokens marked special) by text. */
  get specialTokens(): ReadonlyMap<string, number> {
    return this.#specialTokens;
  }

  /** Encodes text without adding special tokens; special-token text in it becomes single ids. */
  encode(text: string): Int32Array {
    return this.#fastEncode !== null ? this.#fastEncode(text) : this.libraryEncode(text);
  }

  /**
   * {@link encode} through the library's own pipeline only (no fast path): the reference the fast
   * path is checked against.
   */
  libraryEncode(text: string): Int32Array {
    if (text === '') return new Int32Array(0);
    return Int32Array.from(this.#tokenizer.encode(text, { add_special_tokens: false }).ids);
  }

  /** Whether {@link encode} takes the fast path (a supported tokenizer layout that passed its probes). */
  get fastEncoding(): boolean {
    return this.#fastEncode !== null;
  }

  /** Decodes ids to text, special tokens included. */
  decode(ids: ArrayLike<number>): string {
    return this.#tokenizer.decode(Array.from(ids), { skip_special_tokens: false });
  }

  /** The id of a token's text, or undefined when it is not in the vocabulary. */
  tokenId(token: string): number | undefined {
    return this.#tokenizer.token_to_id(token);
  }

  /**
   * The id of a token's text.
   * @throws DressageError `failed_precondition` when the vocabulary lacks it.
   */
  requireTokenId(token: string): number {
    const id = this.tokenId(token);
    if (id === undefined) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `The tokenizer of ${this.files.directory} has no ${token} token`,
        details: { token, path: this.files.directory },
      });
    }
    return id;
  }

  /** The text of one id, or undefined when the id is out of the vocabulary. */
  idToToken(id: number): string | undefined {
    return this.#tokenizer.id_to_token(id);
  }
}

/**
 * Loads the tokenizer of a local Hugging Face model directory (`tokenizer.json` and
 * `tokenizer_config.json`, optionally `chat_template.jinja`).
 *
 * @example
 * ```ts
 * const tokenizer = await loadTokenizer('/models/Qwen3-4B');
 * tokenizer.encode('Hello world'); // Int32Array [9707, 1879]
 * ```
 * @throws DressageError `not_found` or `invalid_argument` for a missing or malformed directory.
 */
export async function loadTokenizer(directory: string): Promise<TitoTokenizer> {
  return new TitoTokenizer(await readModelFiles(directory));
}
