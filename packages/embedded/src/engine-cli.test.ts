import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chatPrompt,
  postJson,
  qwen3ModelDirectory,
  qwen3Tokenizer,
} from './__fixtures__/embedded-fixture.js';
import { loadCheckpoint } from './checkpoint.js';
import { runEngineCli } from './engine-cli.js';

let scratch: string;
const lines: string[] = [];
const io = { log: (line: string) => lines.push(line), error: (line: string) => lines.push(line) };

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'embedded-cli-'));
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

describe('dressage-engine', () => {
  it('initializes a checkpoint from texts, then serves it', async () => {
    const output = join(scratch, 'model');
    const question = chatPrompt('What is 2 + 2?');
    await runEngineCli(
      [
        'init',
        '--tokenizer',
        qwen3ModelDirectory,
        '--output',
        output,
        '--text',
        question,
        '--text',
        '4',
        '--layers',
        '1',
        '--model-dimension',
        '32',
        '--heads',
        '2',
        '--feed-forward',
        '64',
        '--context-length',
        '128',
        '--seed',
        '5',
      ],
      io,
    );
    const checkpoint = await loadCheckpoint(output);
    expect(checkpoint.config).toMatchObject({
      layerCount: 1,
      modelDimension: 32,
      contextLength: 128,
      seed: 5,
    });
    const tokenizer = await qwen3Tokenizer();
    const prompt = Array.from(tokenizer.encode(question));
    expect(prompt.every((id) => checkpoint.vocabulary.has(id))).toBe(true);
    expect(checkpoint.vocabulary.has(151645)).toBe(true);
    expect(checkpoint.vocabulary.has(151657)).toBe(true);

    const server = await runEngineCli(
      ['serve', '--model', output, '--port', '0', '--weight-version', 'w0'],
      io,
    );
    try {
      expect(lines.some((line) => line.startsWith('tfjs backend:'))).toBe(true);
      const { status, body } = await postJson(`${server!.url}/generate`, {
        input_ids: prompt,
        sampling_params: { max_new_tokens: 4, temperature: 0 },
        return_logprob: true,
      });
      expect(status).toBe(200);
      expect(body.meta_info.weight_version).toBe('w0');
      expect(body.output_ids.length).toBeGreaterThan(0);
    } finally {
      await server!.close();
    }
  });

  it('prints usage and rejects bad arguments', async () => {
    expect(await runEngineCli(['--help'], io)).toBeNull();
    expect(lines.at(-1)).toContain('Usage:');
    await expect(runEngineCli(['serve'], io)).rejects.toThrow('--model is required');
    await expect(runEngineCli(['launch'], io)).rejects.toThrow('Unknown command launch');
    await expect(runEngineCli(['serve', '--model', scratch, '--backend', 'gpu'], io)).rejects.toThrow(
      '--backend',
    );
  });
});
