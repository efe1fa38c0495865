import { DressageError } from '@dressage/protocol';
import type { TitoTokenizer } from '@dressage/tito';

/** Anything that turns text into real token ids (a `TitoTokenizer` does). */
export interface TokenEncoder {
  encode(text: string): ArrayLike<number>;
}

/** Options of {@link buildVocabulary}. */
export interface BuildVocabularyOptions {
  /** Texts whose token ids the model must read and write (prompts, rendered chat templates, answers). */
  texts?: Iterable<string>;
  /** Token ids to include as they are (special tokens, stop tokens). */
  tokenIds?: Iterable<number>;
  /** The tokenizer that encodes `texts`; required when `texts` is given. */
  tokenizer?: TokenEncoder;
  /**
   * Includes every added token of this tokenizer, special or not (`<tool_call>` and `<think>` are
   * not special in Qwen3): the ids a chat template and a tool-calling model write.
   */
  addedTokensOf?: TitoTokenizer;
}

/**
 * The compact vocabulary of the embedded model: a sorted table of real tokenizer ids. The model reads
 * and writes real ids through it, so the real tokenizer and chat template stay the source of truth.
 *
 * Slot 0 is the unknown slot every other id maps to on input; slots 1..n are the known ids in
 * ascending order. The output layer scores only known ids (output class `c` is slot `c + 1`), so the
 * model never emits an id outside the table.
 */
export class TokenVocabulary {
  /** Known real ids, ascending and unique. */
  readonly tokenIds: Int32Array;
  readonly #slotById: Map<number, number>;

  constructor(tokenIds: ArrayLike<number>) {
    const sorted = Int32Array.from(new Set(Array.from(tokenIds))).sort();
    if (sorted.length === 0) {
      throw new DressageError({
        code: 'invalid_argument',
        message: 'A vocabulary needs at least one token id',
      });
    }
    for (const id of sorted) {
      if (!Number.isInteger(id) || id < 0) {
        throw new DressageError({
          code: 'invalid_argument',
          message: `Vocabulary token ids must be non-negative integers, got ${id}`,
        });
      }
    }
    this.tokenIds = sorted;
    this.#slotById = new Map();
    for (let index = 0; index < sorted.length; index++) this.#slotById.set(sorted[index]!, index + 1);
  }

  /** Input slots: the known ids plus the unknown slot. */
  get slotCount(): number {
    return this.tokenIds.length + 1;
  }

  /** Output classes: the known ids. */
  get outputCount(): number {
    return this.tokenIds.length;
  }

  /** True when the table holds `tokenId`. */
  has(tokenId: number): boolean {
    return this.#slotById.has(tokenId);
  }

  /** The input slot of a real id (0 when unknown). */
  slotOf(tokenId: number): number {
    return this.#slotById.get(tokenId) ?? 0;
  }

  /** Input slots of real ids. */
  slotsOf(tokenIds: ArrayLike<number>): Int32Array {
    const slots = new Int32Array(tokenIds.length);
    for (let index = 0; index < slots.length; index++) slots[index] = this.slotOf(tokenIds[index]!);
    return slots;
  }

  /** The output class of a real id, or -1 when the table lacks it. */
  outputClassOf(tokenId: number): number {
    return (this.#slotById.get(tokenId) ?? 0) - 1;
  }

  /** The real id of an output class. */
  tokenIdOfOutputClass(outputClass: number): number {
    const id = this.tokenIds[outputClass];
    if (id === undefined) {
      throw new DressageError({
        code: 'out_of_range',
        message: `No output class ${outputClass} in the vocabulary`,
      });
    }
    return id;
  }

  /** True when both tables hold the same ids. */
  equals(other: TokenVocabulary): boolean {
    if (other.tokenIds.length !== this.tokenIds.length) return false;
    for (let index = 0; index < this.tokenIds.length; index++) {
      if (other.tokenIds[index] !== this.tokenIds[index]) return false;
    }
    return true;
  }
}

/**
 * Builds a compact vocabulary from the ids of given texts plus explicit ids.
 *
 * @example
 * ```ts
 * const tokenizer = await loadTokenizer(modelDirectory);
 * const vocabulary = buildVocabulary({
 *   tokenizer,
 *   texts: [renderedPrompt, 'CALC 12 + 30 ;'],
 *   addedTokensOf: tokenizer,
 * });
 * ```
 */
export function buildVocabulary(options: BuildVocabularyOptions): TokenVocabulary {
  const ids = new Set<number>();
  for (const id of options.tokenIds ?? []) ids.add(id);
  if (options.addedTokensOf !== undefined) for (const id of addedTokenIds(options.addedTokensOf)) ids.add(id);
  if (options.texts !== undefined) {
    if (options.tokenizer === undefined) {
      throw new DressageError({
        code: 'invalid_argument',
        message: 'buildVocabulary needs a tokenizer to encode texts',
      });
    }
    for (const text of options.texts)
      for (const id of Array.from(options.tokenizer.encode(text))) ids.add(id);
  }
  return new TokenVocabulary(Array.from(ids));
}

/** Every added token of a tokenizer (special or not: `<tool_call>` and `<think>` are not special in Qwen3). */
export function addedTokenIds(tokenizer: TitoTokenizer): number[] {
  const added = tokenizer.files.tokenizerJson.added_tokens;
  const ids = new Set<number>(tokenizer.specialTokens.values());
  if (Array.isArray(added)) {
    for (const token of added as Array<{ id?: unknown }>) if (typeof token.id === 'number') ids.add(token.id);
  }
  return [...ids];
}
