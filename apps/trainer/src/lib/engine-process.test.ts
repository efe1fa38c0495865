import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildVocabulary, CausalLanguageModel, initializeBackend, saveCheckpoint } from '@dressage/embedded';
import { loadTokenizer } from '@dressage/tito';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultTokenizerPath } from './embedded-stack.js';
import { engineExecutablePath, startEngineProcess } from './engine-process.js';

let scratch: string;
let modelDirectory: string;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'engine-process-'));
  modelDirectory = join(scratch, 'model');
  await initializeBackend({ backend: 'auto', log: () => {} });
  const tokenizer = await loadTokenizer(defaultTokenizerPath());
  const vocabulary = buildVocabulary({ tokenizer, texts: ['The weather in Paris is sunny.'] });
  const model = CausalLanguageModel.create(vocabulary, {
    layerCount: 1,
    modelDimension: 16,
    headCount: 2,
    contextLength: 32,
    seed: 3,
  });
  await saveCheckpoint(modelDirectory, model, { weightVersion: '7' });
  model.dispose();
}, 120_000);

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

describe('startEngineProcess', () => {
  it('serves the checkpoint from a child process and stops it on close', async () => {
    const lines: string[] = [];
    const engine = await startEngineProcess({
      modelDirectory,
      tokenizerDirectory: defaultTokenizerPath(),
      seed: 1,
      port: 0,
      log: (line) => lines.push(line),
    });
    try {
      expect(engine.pid).not.toBe(process.pid);
      const version = await fetch(`${engine.url}/get_weight_version`).then((response) => response.json());
      expect(version).toEqual({ weight_version: '7' });
      const generated = await fetch(`${engine.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          input_ids: [785],
          sampling_params: { max_new_tokens: 3, temperature: 1 },
          return_logprob: true,
        }),
      });
      expect(generated.status).toBe(200);
      expect(lines.some((line) => line.includes('weight version 7'))).toBe(true);
    } finally {
      await engine.close();
    }
    expect(alive(engine.pid)).toBe(false);
  }, 120_000);

  it('names the reason when the engine cannot start', async () => {
    await expect(
      startEngineProcess({
        modelDirectory: join(scratch, 'missing'),
        tokenizerDirectory: defaultTokenizerPath(),
        seed: 1,
        port: 0,
        log: () => {},
      }),
    ).rejects.toThrow(/engine process did not start: exited with code 1/);
  }, 120_000);

  it('exits when its parent goes away (stdin ends), so a killed run leaves no engine behind', async () => {
    const child = spawn(
      process.execPath,
      [engineExecutablePath(), 'serve', '--model', modelDirectory, '--port', '0', '--exit-with-stdin'],
      { stdio: ['pipe', 'pipe', 'ignore'] },
    );
    const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
    expect(chunk.toString()).toMatch(/listening on http:\/\/127\.0\.0\.1:\d+/);
    const exited = once(child, 'exit');
    // What a parent's death does to the pipe: its write end closes.
    child.stdin!.end();
    const [code] = (await exited) as [number | null];
    expect(code).toBe(0);
  }, 120_000);
});
