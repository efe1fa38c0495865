// Pure helpers shared by the server, the browser bundle and the standalone export: no Node imports.

/** How a token is shown: trained on, context the model saw, or context that came from a tool. */
export type TokenKind = 'trainable' | 'context' | 'tool';

/** A run of consecutive tokens with the same weight version; `end` is exclusive. */
export interface TokenVersionSpan {
  start: number;
  end: number;
  version: string;
}

/**
 * Classifies each token from its loss mask and decoded text. Tool results are context tokens inside a
 * `<tool_response>` span or inside a chat message whose role is `tool` (`<|im_start|>tool`).
 */
export function classifyTokens(texts: readonly string[], lossMask: readonly number[]): TokenKind[] {
  const kinds = new Array<TokenKind>(texts.length);
  let role: string | null = null;
  let expectingRole = false;
  let insideToolResponse = false;
  for (let index = 0; index < texts.length; index++) {
    const text = texts[index] ?? '';
    const trimmed = text.trim();
    if (expectingRole && trimmed !== '') {
      role = trimmed;
      expectingRole = false;
    }
    if (text === '<|im_start|>') {
      expectingRole = true;
      role = null;
    }
    if (trimmed === '<tool_response>') insideToolResponse = true;
    const inTool = insideToolResponse || role === 'tool';
    kinds[index] = lossMask[index] === 1 ? 'trainable' : inTool ? 'tool' : 'context';
    if (trimmed === '</tool_response>') insideToolResponse = false;
    if (text === '<|im_end|>') role = null;
  }
  return kinds;
}

/** The CSS classes of a token element. */
export function tokenClassName(kind: TokenKind): string {
  return `token token-${kind}`;
}

/** Groups per-token versions into runs. */
export function versionSpans(versions: readonly string[] | null): TokenVersionSpan[] {
  if (versions === null) return [];
  const spans: TokenVersionSpan[] = [];
  for (let index = 0; index < versions.length; index++) {
    const version = versions[index]!;
    const last = spans.at(-1);
    if (last !== undefined && last.version === version) last.end = index + 1;
    else spans.push({ start: index, end: index + 1, version });
  }
  return spans;
}

/** Shows whitespace: spaces as `·`, tabs as `→`, newlines as `↵` followed by the real line break. */
export function visibleText(text: string): string {
  return text.replace(/ /g, '·').replace(/\t/g, '→').replace(/\r/g, '␍').replace(/\n/g, '↵\n');
}
