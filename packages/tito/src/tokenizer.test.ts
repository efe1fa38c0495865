import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { beforeAll, describe, expect, it } from 'vitest';
import { qwen3ModelDirectory, qwen3Tokenizer } from './__fixtures__/qwen3-model.js';
import { readModelFiles } from './model-directory.js';
import { loadTokenizer, type TitoTokenizer } from './tokenizer.js';

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    expect(DressageError.isInstance(error)).toBe(true);
    return (error as DressageError).code;
  }
}

describe('loadTokenizer with the real Qwen3 files', () => {
  let tokenizer: TitoTokenizer;
  beforeAll(async () => {
    tokenizer = await qwen3Tokenizer();
  });

  it('encodes to Int32Array without adding special tokens and round-trips text', () => {
    const ids = tokenizer.encode('Hello world');
    expect(ids).toBeInstanceOf(Int32Array);
    expect(Array.from(ids)).toEqual([9707, 1879]);
    expect(tokenizer.encode('')).toHaveLength(0);
    const text = '<|im_start|>user\nnaïve 日本語 🙂<|im_end|>\n';
    expect(tokenizer.decode(tokenizer.encode(text))).toBe(text);
  });

  it('maps the chat special tokens to single ids', () => {
    expect(tokenizer.requireTokenId('<|im_start|>')).toBe(151644);
    expect(tokenizer.requireTokenId('<|im_end|>')).toBe(151645);
    expect(tokenizer.requireTokenId('<think>')).toBe(151667);
    expect(Array.from(tokenizer.encode('<tool_response>'))).toEqual([151665]);
    expect(tokenizer.specialTokens.get('<|endoftext|>')).toBe(151643);
    expect(tokenizer.eosToken).toBe('<|im_end|>');
    expect(tokenizer.bosToken).toBeNull();
    expect(tokenizer.idToToken(151645)).toBe('<|im_end|>');
    expect(() => tokenizer.requireTokenId('<|nope|>')).toThrow(
      expect.objectContaining({ code: 'failed_precondition' }),
    );
  });

  it('exposes the chat template from tokenizer_config.json', () => {
    expect(tokenizer.chatTemplate).toContain('<|im_start|>');
  });
});

describe('model directory errors', () => {
  it('reports a missing directory, a file instead of a directory and missing files', async () => {
    const empty = await mkdtemp(join(tmpdir(), 'tito-empty-'));
    expect(await codeOf(loadTokenizer(join(empty, 'absent')))).toBe('not_found');
    expect(await codeOf(loadTokenizer(join(qwen3ModelDirectory, 'tokenizer.json')))).toBe('invalid_argument');
    expect(await codeOf(loadTokenizer(empty))).toBe('not_found');
  });

  it('reports malformed JSON, a non-object file, a file that is not a tokenizer and a bad template', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'tito-bad-'));
    await writeFile(join(directory, 'tokenizer.json'), '{"model": ');
    await writeFile(join(directory, 'tokenizer_config.json'), '{}');
    expect(await codeOf(loadTokenizer(directory))).toBe('invalid_argument');
    await writeFile(join(directory, 'tokenizer.json'), '[1, 2]');
    expect(await codeOf(loadTokenizer(directory))).toBe('invalid_argument');
    await writeFile(join(directory, 'tokenizer.json'), '{"version": "1.0"}');
    expect(await codeOf(loadTokenizer(directory))).toBe('invalid_argument');
    await writeFile(join(directory, 'tokenizer.json'), '{"model": {"type": "NoSuchModel"}}');
    expect(await codeOf(loadTokenizer(directory))).toBe('invalid_argument');
    await writeFile(join(directory, 'tokenizer.json'), '{"model": {}}');
    await writeFile(join(directory, 'tokenizer_config.json'), '{"chat_template": 42}');
    expect(await codeOf(readModelFiles(directory))).toBe('invalid_argument');
  });

  it('prefers chat_template.jinja and accepts a list of named templates', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'tito-template-'));
    await mkdir(directory, { recursive: true });
    await writeFile(join(directory, 'tokenizer.json'), '{"model": {}}');
    await writeFile(
      join(directory, 'tokenizer_config.json'),
      JSON.stringify({
        chat_template: [
          { name: 'tool_use', template: 'T' },
          { name: 'default', template: 'D' },
        ],
      }),
    );
    expect((await readModelFiles(directory)).chatTemplate).toBe('D');
    await writeFile(join(directory, 'chat_template.jinja'), 'J');
    expect((await readModelFiles(directory)).chatTemplate).toBe('J');
  });
});
