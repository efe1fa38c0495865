// Faster equivalents of two pre-tokenizer steps of `@huggingface/tokenizers`, which dominate the
// encoding of the short texts TITO appends: the byte-level step maps every pre-token through
// `TextEncoder` and `Array.from(...).join('')`, and every pre-tokenizer flattens its output with
// `Array.prototype.flat`. ASCII pre-tokens (nearly all of chat text) map one character per byte
// through a table; anything else keeps the library's own path.

interface PreTokenizerLike {
  pre_tokenize(text: string | string[], options?: unknown): string[];
  pre_tokenize_text(text: string, options?: unknown): string[] | string;
  tokenizers?: unknown;
}

interface ByteLevelLike extends PreTokenizerLike {
  byte_encoder: Record<number, string>;
  text_encoder: { encode(text: string): Uint8Array };
  add_prefix_space: boolean;
  use_regex: boolean;
  pattern: RegExp;
}

function isPreTokenizer(value: unknown): value is PreTokenizerLike {
  if (typeof value !== 'function' && (typeof value !== 'object' || value === null)) return false;
  const candidate = value as Partial<PreTokenizerLike>;
  return typeof candidate.pre_tokenize === 'function' && typeof candidate.pre_tokenize_text === 'function';
}

function isByteLevel(value: PreTokenizerLike): value is ByteLevelLike {
  const candidate = value as Partial<ByteLevelLike>;
  return (
    typeof candidate.byte_encoder === 'object' &&
    candidate.byte_encoder !== null &&
    typeof candidate.text_encoder?.encode === 'function' &&
    typeof candidate.add_prefix_space === 'boolean' &&
    typeof candidate.use_regex === 'boolean' &&
    candidate.pattern instanceof RegExp
  );
}

function preTokenizersOf(value: unknown, found: PreTokenizerLike[]): PreTokenizerLike[] {
  if (!isPreTokenizer(value)) return found;
  found.push(value);
  if (Array.isArray(value.tokenizers)) for (const child of value.tokenizers) preTokenizersOf(child, found);
  return found;
}

// `Array.prototype.flat` (depth 1) of a pre-tokenizer's output, appended to `out`.
function appendFlat(out: string[], pieces: string[] | string): void {
  if (!Array.isArray(pieces)) {
    out.push(pieces);
    return;
  }
  for (const piece of pieces) {
    if (Array.isArray(piece)) for (const inner of piece as string[]) out.push(inner);
    else out.push(piece);
  }
}

function fastPreTokenize(this: PreTokenizerLike, text: string | string[], options?: unknown): string[] {
  const out: string[] = [];
  if (!Array.isArray(text)) {
    appendFlat(out, this.pre_tokenize_text(text, options));
    return out;
  }
  for (const item of text) {
    // `map` then `flat`: each item's result is one element, spread one level.
    const pieces = this.pre_tokenize_text(item, options);
    if (Array.isArray(pieces)) for (const piece of pieces) out.push(piece);
    else out.push(pieces);
  }
  return out;
}

function byteLevelText(byteLevel: ByteLevelLike): (this: ByteLevelLike, text: string) => string[] {
  const table: string[] = [];
  for (let byte = 0; byte < 128; byte++) table.push(byteLevel.byte_encoder[byte]!);
  const mapToken = (token: string): string => {
    let mapped = '';
    for (let index = 0; index < token.length; index++) {
      const code = token.charCodeAt(index);
      if (code >= 128) {
        // Non-ASCII: the library's own UTF-8 path (lone surrogates included).
        const bytes = byteLevel.text_encoder.encode(token);
        return Array.from(bytes, (byte) => byteLevel.byte_encoder[byte]).join('');
      }
      mapped += table[code];
    }
    return mapped;
  };
  return function (this: ByteLevelLike, text: string): string[] {
    let input = text;
    if (this.add_prefix_space && !input.startsWith(' ')) input = ` ${input}`;
    if (!this.use_regex) return [mapToken(input)];
    return (input.match(this.pattern) ?? []).map(mapToken);
  };
}

/**
 * Replaces pre-tokenizer methods of a `@huggingface/tokenizers` instance with faster equivalents
 * (instance properties shadowing the library's methods). `encode` is checked on probe texts before
 * and after: any difference restores the library's methods. Returns whether the replacement stayed.
 */
export function acceleratePreTokenizer(
  tokenizer: unknown,
  encode: (text: string) => readonly number[],
  probes: readonly string[],
): boolean {
  const found = preTokenizersOf((tokenizer as { pre_tokenizer?: unknown } | null)?.pre_tokenizer, []);
  if (found.length === 0) return false;
  const expected = probes.map((probe) => encode(probe).join(','));
  for (const preTokenizer of found) {
    preTokenizer.pre_tokenize = fastPreTokenize;
    if (isByteLevel(preTokenizer)) preTokenizer.pre_tokenize_text = byteLevelText(preTokenizer);
  }
  let same = true;
  try {
    same = probes.every((probe, index) => encode(probe).join(',') === expected[index]);
  } catch {
    same = false;
  }
  if (!same) {
    for (const preTokenizer of found) {
      delete (preTokenizer as Partial<PreTokenizerLike>).pre_tokenize;
      delete (preTokenizer as Partial<PreTokenizerLike>).pre_tokenize_text;
    }
  }
  return same;
}
