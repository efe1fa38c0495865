import { fileURLToPath } from 'node:url';
import { createSample, type Sample } from '@dressage/protocol';
import { runReadmeExample } from '@dressage/vitest-config/readme';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ScriptedModelServer } from './__fixtures__/scripted-model.js';
import { httpTrajectoryProxy } from './paddock/trajectory-proxy.js';
import type { WhiteboxGenerateOptions } from './paddock/whitebox.js';

type Json = Record<string, unknown>;

const packageDirectory = fileURLToPath(new URL('..', import.meta.url));

afterEach(() => {
  vi.restoreAllMocks();
});

describe('README', () => {
  it('runs the whitebox tools example: a bad call answered, the tools run, the trajectory recorded', async () => {
    // The model: a call with an argument the schema refuses, then both tools, then the answer.
    const seen: Json[][] = [];
    const model = new ScriptedModelServer((request, { step }) => {
      seen.push(structuredClone(request.messages as Json[]));
      if (step === 0) return { content: '', tool_calls: [{ name: 'price', arguments: { fruit: 'kiwi' } }] };
      if (step === 1)
        return {
          content: '',
          tool_calls: [
            { name: 'price', arguments: { fruit: 'apple' } },
            { name: 'multiply', arguments: { a: 0.5, b: 4 } },
          ],
        };
      return { content: 'Four apples cost 2 euros.' };
    });
    const url = await model.start();
    try {
      const { generateWith } = (await runReadmeExample(packageDirectory, { name: 'whitebox-tools' })) as {
        generateWith: (options: WhiteboxGenerateOptions) => (sample: Sample) => Promise<Sample[]>;
      };
      const generate = generateWith({ proxy: httpTrajectoryProxy(url), proxyUrl: url });
      const samples = await generate(
        createSample({ index: 0, group_index: 0, prompt: 'What do four apples cost?' }),
      );
      expect(samples.length).toBeGreaterThan(0);
      expect(samples.map((sample) => [sample.remove_sample, sample.metadata.whitebox_error])).toEqual(
        samples.map(() => [false, undefined]),
      );
      expect(samples.at(-1)?.response).toContain('Four apples cost 2 euros.');
      expect(seen).toHaveLength(3);
      const afterBadCall = seen[1]!.at(-1)!;
      expect(afterBadCall).toMatchObject({ role: 'tool' });
      expect(String(afterBadCall.content)).toMatch(/^Error: invalid arguments for price: fruit: /);
      expect(seen[2]!.slice(-2).map((message) => message.content)).toEqual(['0.5', '2']);
    } finally {
      await model.close();
    }
  });
});
