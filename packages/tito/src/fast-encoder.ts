// An exact, faster `encode` for the tokenizer layout of Qwen-style models: added tokens split out
// first, a Unicode normalizer, a `Split` regex pre-tokenizer followed by a byte-level mapping, and
// byte-level BPE. `@huggingface/tokenizers` builds several arrays and objects per pre-token (the
// flatMap chains of `encode_text`, the mapped strings, the token strings, an attention mask). Here
// each regex piece is looked up in a cache of its ids, so a piece seen before (most pieces of chat
// text: words, spaces, punctuation) costs one Map lookup. Pieces not in the cache go through the
// library's own byte-level mapping and BPE model, so the ids are the library's by construction.

import { asciiPieceEnd, qwenSplitSource, qwenTokenizerPattern } from './ascii-pieces.js';

interface AddedTokenLike {
  content: string;
  id: number;
  lstrip: boolean;
  rstrip: boolean;
  normalized: boolean;
}

interface ConfiguredLike {
  config?: { type?: unknown; invert?: unknown; behavior?: unknown };
}

interface SplitLike extends ConfiguredLike {
  pattern: unknown;
  config?: ConfiguredLike['config'] & { pattern?: { Regex?: unknown } };
}

interface ByteLevelLike extends ConfiguredLike {
  add_prefix_space: unknown;
  use_regex: unknown;
  pre_tokenize(text: string[], options?: unknown): string[];
}

interface DictionarySplitterLike {
  split(text: string): string[];
  /** The added tokens as a trie of code units (`Object.create(null)` nodes, `end` at a token's end). */
  trie?: unknown;
}

interface LibraryTokenizerLike {
  splitter_unnormalized: DictionarySplitterLike;
  added_tokens: AddedTokenLike[];
  added_tokens_map: Map<string, { id: number }>;
  normalizer: (((text: string) => string) & ConfiguredLike) | null;
  pre_tokenizer: (ConfiguredLike & { tokenizers?: unknown }) | null;
  model: ((tokens: string[]) => string[]) & { tokens_to_ids: Map<string, number>; unk_token_id?: number };
  post_processor: ConfiguredLike | null;
  remove_space?: unknown;
  do_lowercase_and_remove_accent?: unknown;
}

// Unicode normal forms leave ASCII text unchanged, so ASCII sections skip the normalizer.
const unicodeNormalizers = new Set(['NFC', 'NFD', 'NFKC', 'NFKD']);
const asciiOnly = /^\p{ASCII}*$/u;
// Bounds of the piece cache: pieces longer than this are rare (long words, whitespace runs) and
// not worth keeping; a full cache starts over.
const MAX_CACHED_PIECE_LENGTH = 64;
const MAX_CACHED_PIECES = 200_000;

function typeOf(value: ConfiguredLike | null | undefined): unknown {
  return value?.config?.type;
}

/** The encoder's view of a library tokenizer it supports, or null for any other layout. */
function supportedLayout(
  tokenizer: LibraryTokenizerLike,
): { split: RegExp; splitPattern: string | undefined; byteLevel: ByteLevelLike } | null {
  if (typeof tokenizer.splitter_unnormalized?.split !== 'function') return null;
  if (!(tokenizer.added_tokens_map instanceof Map) || !Array.isArray(tokenizer.added_tokens)) return null;
  if (typeof tokenizer.model !== 'function' || !(tokenizer.model.tokens_to_ids instanceof Map)) return null;
  // Whitespace stripping around added tokens, normalized added tokens, and the legacy text options
  // change the sections; none of them is handled here.
  for (const token of tokenizer.added_tokens) {
    if (token.lstrip || token.rstrip) return null;
    if (token.normalized && tokenizer.normalizer !== null) return null;
  }
  if (tokenizer.remove_space === true || tokenizer.do_lowercase_and_remove_accent === true) return null;
  const normalizerType = typeOf(tokenizer.normalizer);
  if (tokenizer.normalizer !== null && !unicodeNormalizers.has(normalizerType as string)) return null;
  // The post-processor must return the tokens unchanged (ByteLevel does, without a pair).
  if (tokenizer.post_processor !== null && typeOf(tokenizer.post_processor) !== 'ByteLevel') return null;
  const preTokenizer = tokenizer.pre_tokenizer;
  // A pre-tokenizer sequence (the library keeps no config on it, only its members).
  if (!Array.isArray(preTokenizer?.tokenizers)) return null;
  const [split, byteLevel, ...rest] = preTokenizer.tokenizers as [SplitLike, ByteLevelLike, ...unknown[]];
  if (rest.length > 0 || split === undefined || byteLevel === undefined) return null;
  const behavior = split.config?.behavior;
  if (
    typeOf(split) !== 'Split' ||
    split.config?.invert !== false ||
    typeof behavior !== 'string' ||
    behavior.toLowerCase() !== 'isolated' ||
    !(split.pattern instanceof RegExp) ||
    !split.pattern.global
  ) {
    return null;
  }
  if (
    typeOf(byteLevel) !== 'ByteLevel' ||
    byteLevel.add_prefix_space !== false ||
    byteLevel.use_regex !== false ||
    typeof byteLevel.pre_tokenize !== 'function'
  ) {
    return null;
  }
  const raw = split.config?.pattern?.Regex;
  return { split: split.pattern, splitPattern: typeof raw === 'string' ? raw : undefined, byteLevel };
}

/** A piece splitter (see {@link createPieceSplitter}). */
export interface PieceSplitter {
  /**
   * Hands the pieces of `text` to `onPiece` in order; with `onUnit`, a piece of one ASCII code unit
   * that it matched by hand goes to `onUnit` as that code unit instead (no string made for it).
   */
  (text: string, onPiece: (piece: string) => void, onUnit?: (code: number) => void): void;
  /** True when it matches Qwen's pattern by hand over ASCII (ascii-pieces.ts), the regex elsewhere. */
  readonly byHand: boolean;
}

/**
 * The library's `regex_split` of a text by a global pattern: the matches and the text between them,
 * empty matches dropped, handed to `onPiece` in order. `tokenizerPattern` is the pattern as the
 * tokenizer file writes it, which the library compiled to `pattern`: Qwen's is matched by hand over
 * ASCII (as is `pattern` itself when its source is {@link qwenSplitSource}). Exported for tests.
 */
export function createPieceSplitter(pattern: RegExp, tokenizerPattern?: string): PieceSplitter {
  // Own copies of the pattern, so the library's lastIndex is never moved under it.
  const global = new RegExp(pattern.source, pattern.flags);
  const fullUnicode = global.flags.includes('u') || global.flags.includes('v');
  const sticky = new RegExp(global.source, `${global.flags.replace('g', '')}y`);
  const splitFrom = (text: string, from: number, onPiece: (piece: string) => void) => {
    let previous = from;
    global.lastIndex = from;
    for (let match = global.exec(text); match !== null; match = global.exec(text)) {
      const whole = match[0];
      const at = match.index;
      if (previous < at) onPiece(text.slice(previous, at));
      if (whole.length > 0) onPiece(whole);
      // Past an empty match, as matchAll moves on: one code point (unicode) or one code unit.
      else global.lastIndex = at + (fullUnicode && text.codePointAt(at)! > 0xffff ? 2 : 1);
      previous = at + whole.length;
    }
    if (previous < text.length) onPiece(text.slice(previous));
  };
  // Qwen's pattern is matched by hand where the text is ASCII (ascii-pieces.ts), the regex elsewhere.
  const qwen = tokenizerPattern === qwenTokenizerPattern || global.source === qwenSplitSource;
  const scan = qwen && global.flags === 'gu' ? asciiPieceEnd : null;
  // Without a match object per piece: while a non-empty match starts right where the last one ended
  // (always, for patterns that cover the text), `test` on the sticky copy gives its end.
  const splitter = (text: string, onPiece: (piece: string) => void, onUnit?: (code: number) => void) => {
    let position = 0;
    while (position < text.length) {
      let stop = scan === null ? -1 : scan(text, position);
      if (stop === -1) {
        sticky.lastIndex = position;
        if (!sticky.test(text) || sticky.lastIndex === position) {
          splitFrom(text, position, onPiece);
          return;
        }
        stop = sticky.lastIndex;
      } else if (stop === position + 1 && onUnit !== undefined) {
        // Hand-matched pieces are ASCII.
        onUnit(text.charCodeAt(position));
        position = stop;
        continue;
      }
      onPiece(text.slice(position, stop));
      position = stop;
    }
  };
  return Object.assign(splitter, { byHand: scan !== null });
}

type TrieNode = { [codeUnit: string]: TrieNode | undefined } & { end?: string };

/**
 * The library's split of a text at its added tokens (`DictionarySplitter.split`): the longest added
 * token starting at each position, left to right, and the text between. The library walks its trie
 * from every position; a token can only start where the text has one of the trie's first code
 * units, so this walks it only there, found with `indexOf` (one call per first unit: Qwen's added
 * tokens all start with `<`). The library's own split where its trie is not as expected or has many
 * first units. Exported for tests.
 */
export function createSectionSplitter(splitter: DictionarySplitterLike): (text: string) => string[] {
  const trie = splitter.trie as TrieNode | undefined;
  const librarySplit = (text: string) => splitter.split(text);
  if (typeof trie !== 'object' || trie === null || trie.end !== undefined) return librarySplit;
  const firsts = Object.keys(trie);
  if (firsts.length > 8 || firsts.some((unit) => unit.length !== 1)) return librarySplit;
  const nextStart = (text: string, from: number): number => {
    let next = -1;
    for (const unit of firsts) {
      const at = text.indexOf(unit, from);
      if (at !== -1 && (next === -1 || at < next)) next = at;
    }
    return next;
  };
  return (text) => {
    const sections: string[] = [];
    const length = text.length;
    let start = 0;
    for (let position = nextStart(text, 0); position !== -1; ) {
      let node: TrieNode | undefined = trie;
      let match: string | undefined;
      for (let index = position; index < length; index++) {
        node = node[text[index] as string];
        if (node === undefined) break;
        if (node.end !== undefined) match = node.end;
      }
      if (match === undefined) {
        position = nextStart(text, position + 1);
        continue;
      }
      if (position > start) sections.push(text.slice(start, position));
      sections.push(match);
      start = position + match.length;
      position = nextStart(text, start);
    }
    if (start < length) sections.push(text.slice(start));
    return sections;
  };
}

/**
 * An `encode(text)` (no special tokens added) equal to the library tokenizer's, or null when the
 * tokenizer's layout is not the one this encoder implements. Callers check it on probe texts too.
 */
export function createFastEncoder(library: unknown): ((text: string) => Int32Array) | null {
  const tokenizer = library as LibraryTokenizerLike;
  const layout = supportedLayout(tokenizer);
  if (layout === null) return null;
  const { split, splitPattern, byteLevel } = layout;
  const added = tokenizer.added_tokens_map;
  const model = tokenizer.model;
  const normalizer = tokenizer.normalizer;
  const idOf = (token: string): number =>
    added.get(token)?.id ?? model.tokens_to_ids.get(token) ?? model.unk_token_id ?? 0;
  // A piece's ids: one number for the common single-token piece, an array otherwise.
  const cache = new Map<string, number | Int32Array>();
  let output = new Int32Array(1024);
  let length = 0;

  const push = (id: number) => {
    if (length === output.length) {
      const grown = new Int32Array(output.length * 2);
      grown.set(output);
      output = grown;
    }
    output[length++] = id;
  };

  const pushPiece = (piece: string) => {
    let ids = cache.get(piece);
    if (ids === undefined) {
      const tokens = model(byteLevel.pre_tokenize([piece]));
      ids = tokens.length === 1 ? idOf(tokens[0] as string) : Int32Array.from(tokens, idOf);
      if (piece.length <= MAX_CACHED_PIECE_LENGTH) {
        if (cache.size >= MAX_CACHED_PIECES) cache.clear();
        cache.set(piece, ids);
      }
    }
    if (typeof ids === 'number') push(ids);
    else for (let index = 0; index < ids.length; index++) push(ids[index] as number);
  };

  const pieces = createPieceSplitter(split, splitPattern);
  const sectionsOf = createSectionSplitter(tokenizer.splitter_unnormalized);
  // The ids of one-character ASCII pieces (digits, punctuation, a lone space or line break: about
  // half the pieces of code and tool output) by code unit, -1 until first seen: no string and no
  // lookup for them. Filled from pushPiece, so they are the cache's ids.
  const unitIds = new Int32Array(128).fill(-1);
  const pushUnit = (code: number) => {
    const id = unitIds[code]!;
    if (id >= 0) {
      push(id);
      return;
    }
    const start = length;
    pushPiece(String.fromCharCode(code));
    if (length === start + 1) unitIds[code] = output[start]!;
  };

  const pushPieces = (text: string) => pieces(text, pushPiece, pushUnit);

  return (text: string): Int32Array => {
    length = 0;
    for (const section of sectionsOf(text)) {
      if (section.length === 0) continue;
      const token = added.get(section);
      if (token !== undefined) {
        push(token.id);
        continue;
      }
      let normalized = section;
      if (normalizer !== null && !asciiOnly.test(section)) {
        normalized = normalizer(section);
        if (normalized.length === 0) continue;
        const same = added.get(normalized);
        if (same !== undefined) {
          push(same.id);
          continue;
        }
      }
      pushPieces(normalized);
    }
    return output.slice(0, length);
  };
}
