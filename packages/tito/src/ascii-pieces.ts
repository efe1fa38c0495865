// The pre-tokenizer pattern of Qwen2 and Qwen3 (and GPT-4's cl100k family without its digit runs),
// matched by hand over ASCII text. Running the regex once per piece costs more than the rest of
// the encoding of a cached piece; a table of character classes and a few comparisons give the same
// pieces. Wherever a decision needs a character outside ASCII (a letter like `é` may continue a
// word, `\u00a0` a whitespace run), the caller's regex decides that piece instead.

/**
 * The pattern as Qwen2's and Qwen3's `tokenizer.json` write it (the `Split` pre-tokenizer's
 * `pattern.Regex`). `@huggingface/tokenizers` compiles it to a JavaScript source of its own (`\s`
 * as `\p{White_Space}`, the case-insensitive group spelled out), which differs between library
 * versions; the file's pattern does not.
 */
export const qwenTokenizerPattern =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** The pattern written as a JavaScript regex source (flags `gu`). */
export const qwenSplitSource =
  "(?:'([sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD]))|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// Character classes of ASCII code units. `other` is [^\s\p{L}\p{N}]: punctuation, symbols and the
// control characters that are not whitespace.
const other = 0;
const letter = 1;
const digit = 2;
const space = 3; // whitespace other than CR and LF: tab, vertical tab, form feed, space
const newline = 4; // CR, LF
const outside = 5; // not ASCII: the regex decides
const end = 6;

const classes = new Uint8Array(128);
for (let code = 0; code < 128; code++) {
  if ((code >= 0x41 && code <= 0x5a) || (code >= 0x61 && code <= 0x7a)) classes[code] = letter;
  else if (code >= 0x30 && code <= 0x39) classes[code] = digit;
  else if (code === 0x0a || code === 0x0d) classes[code] = newline;
  else if (code === 0x20 || (code >= 0x09 && code <= 0x0c)) classes[code] = space;
  else classes[code] = other;
}

function classAt(text: string, index: number): number {
  if (index >= text.length) return end;
  const code = text.charCodeAt(index);
  return code < 128 ? (classes[code] as number) : outside;
}

// The end of a run of `kind` from `from`, or -1 when a character outside ASCII ends it (it might
// belong to the run).
function runEnd(text: string, from: number, kind: number): number {
  let index = from;
  for (;;) {
    const found = classAt(text, index);
    if (found === kind) index++;
    else return found === outside ? -1 : index;
  }
}

// `'s`, `'t`, `'re`, `'ve`, `'m`, `'ll`, `'d`, any case: the contraction's end, or -1.
function contractionEnd(text: string, at: number): number {
  const first = text.charCodeAt(at + 1) | 0x20;
  if (first === 0x73 || first === 0x74 || first === 0x6d || first === 0x64) return at + 2; // s t m d
  const second = text.charCodeAt(at + 2) | 0x20;
  if ((first === 0x72 || first === 0x76) && second === 0x65) return at + 3; // re ve
  if (first === 0x6c && second === 0x6c) return at + 3; // ll
  return -1;
}

/**
 * The end of the pattern's match at `at` (`at` < `text.length`), or -1 when it depends on a
 * character outside ASCII. Each alternative in the pattern's order: a contraction; an optional
 * non-letter, non-digit, non-newline character and a letter run; one digit; an optional space, a
 * run of `other` and any newlines; whitespace through its last newline; whitespace not followed by
 * a non-space (all of the run at the text's end, else all but its last character); whitespace.
 */
export function asciiPieceEnd(text: string, at: number): number {
  const code = text.charCodeAt(at);
  if (code >= 128) return -1;
  const kind = classes[code] as number;
  if (code === 0x27) {
    const next = classAt(text, at + 1);
    if (next === outside) return -1;
    const contraction = contractionEnd(text, at);
    if (contraction !== -1) return contraction;
  }
  if (kind === letter) return runEnd(text, at, letter);
  if (kind === digit) return at + 1;
  if (kind === other || kind === space) {
    const next = classAt(text, at + 1);
    if (next === outside) return -1;
    if (next === letter) return runEnd(text, at + 1, letter);
    const start = kind === other ? at : code === 0x20 && next === other ? at + 1 : -1;
    if (start !== -1) {
      const symbols = runEnd(text, start, other);
      // A newline run ends at anything else, ASCII or not.
      return symbols === -1 ? -1 : newlineRunEnd(text, symbols);
    }
  }
  // Whitespace (a space or tab not followed by a letter or a symbol, or a newline).
  const runStop = whitespaceRunEnd(text, at);
  if (runStop === -1) return -1;
  for (let index = runStop - 1; index >= at; index--) {
    if (classes[text.charCodeAt(index)] === newline) return index + 1;
  }
  if (runStop === text.length) return runStop;
  return runStop - at >= 2 ? runStop - 1 : runStop;
}

function newlineRunEnd(text: string, from: number): number {
  let index = from;
  while (index < text.length) {
    const code = text.charCodeAt(index);
    if (code !== 0x0a && code !== 0x0d) break;
    index++;
  }
  return index;
}

function whitespaceRunEnd(text: string, from: number): number {
  let index = from;
  for (;;) {
    const found = classAt(text, index);
    if (found === space || found === newline) index++;
    else return found === outside ? -1 : index;
  }
}
