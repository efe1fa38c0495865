import { describe, expect, it } from 'vitest';
import { classifyTokens, tokenClassName, versionSpans, visibleText } from './token-kinds.js';

describe('classifyTokens', () => {
  it('marks trainable tokens from the mask and tool results inside <tool_response>', () => {
    const texts = [
      '<|im_start|>',
      'user',
      '\n',
      '<tool_response>',
      '\n',
      '42',
      '</tool_response>',
      '<|im_end|>',
      'ok',
    ];
    const mask = [0, 0, 0, 0, 0, 0, 0, 0, 1];
    expect(classifyTokens(texts, mask)).toEqual([
      'context',
      'context',
      'context',
      'tool',
      'tool',
      'tool',
      'tool',
      'context',
      'trainable',
    ]);
  });

  it('treats a whole tool-role message as tool result, and the mask wins over it', () => {
    const texts = ['<|im_start|>', 'tool', '\n', 'out', '<|im_end|>', '<|im_start|>', 'assistant', 'x'];
    expect(classifyTokens(texts, [0, 0, 0, 0, 0, 0, 0, 1])).toEqual([
      'context',
      'tool',
      'tool',
      'tool',
      'tool',
      'context',
      'context',
      'trainable',
    ]);
    expect(classifyTokens(['<|im_start|>', 'tool', 'x'], [0, 0, 1])[2]).toBe('trainable');
  });

  it('gives each kind its own CSS class', () => {
    expect(tokenClassName('trainable')).toBe('token token-trainable');
    expect(tokenClassName('context')).toBe('token token-context');
    expect(tokenClassName('tool')).toBe('token token-tool');
  });
});

describe('versionSpans', () => {
  it('groups consecutive equal versions with exclusive ends', () => {
    expect(versionSpans(['-1', '-1', '3', '3', '4', '-1'])).toEqual([
      { start: 0, end: 2, version: '-1' },
      { start: 2, end: 4, version: '3' },
      { start: 4, end: 5, version: '4' },
      { start: 5, end: 6, version: '-1' },
    ]);
    expect(versionSpans(null)).toEqual([]);
    expect(versionSpans([])).toEqual([]);
  });
});

describe('visibleText', () => {
  it('makes whitespace visible and keeps real line breaks', () => {
    expect(visibleText(' a\tb\n')).toBe('·a→b↵\n');
  });
});
