import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer } from '@dressage/tito';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3ModelDirectory, smallConfig, testVocabulary } from './__fixtures__/embedded-fixture.js';
import { initializeBackend } from './backend.js';
import {
  checkpointWeightsFile,
  loadCheckpoint,
  loadModel,
  loadWeightsFor,
  saveCheckpoint,
  weightsEqual,
} from './checkpoint.js';
import { CausalLanguageModel } from './model.js';
import { SupervisedTrainer } from './supervised-trainer.js';
import { TokenVocabulary } from './vocabulary.js';

let scratch: string;

beforeAll(async () => {
  await initializeBackend();
  scratch = await mkdtemp(join(tmpdir(), 'embedded-checkpoint-'));
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
    return 'resolved';
  } catch (error) {
    return (error as { code: string }).code;
  }
}

describe('checkpoints', () => {
  it('round-trip trained weights bit-exactly, with config, vocabulary, version and tokenizer files', async () => {
    const vocabulary = await testVocabulary();
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const trainer = new SupervisedTrainer(model);
    const tokenIds = Array.from(vocabulary.tokenIds.slice(0, 30));
    for (let step = 0; step < 3; step++) trainer.step([{ tokenIds }]);
    const directory = join(scratch, 'trained');
    await saveCheckpoint(directory, model, {
      weightVersion: 'step-3',
      tokenizerDirectory: qwen3ModelDirectory,
    });
    const checkpoint = await loadCheckpoint(directory);
    expect(checkpoint.weightVersion).toBe('step-3');
    expect(checkpoint.config).toEqual(model.config);
    expect(checkpoint.vocabulary.equals(vocabulary)).toBe(true);
    expect(weightsEqual(checkpoint.weights, model.getWeights())).toBe(true);
    const { model: restored, weightVersion } = await loadModel(directory);
    expect(weightVersion).toBe('step-3');
    const sequence = [...tokenIds].reverse();
    expect(Array.from(restored.sequenceLogprobs([sequence])[0]!)).toEqual(
      Array.from(model.sequenceLogprobs([sequence])[0]!),
    );
    // The checkpoint is a model directory the tokenizer loads from too.
    const tokenizer = await loadTokenizer(directory);
    expect(Array.from(tokenizer.encode('Hello world'))).toEqual([9707, 1879]);
    // Saving again over the same directory replaces it in place.
    await saveCheckpoint(directory, restored, { weightVersion: 'again' });
    expect((await loadCheckpoint(directory)).weightVersion).toBe('again');
    trainer.dispose();
    model.dispose();
    restored.dispose();
  });

  it('rejects missing, corrupt and mismatched checkpoints', async () => {
    const vocabulary = await testVocabulary();
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const directory = join(scratch, 'corrupt');
    await saveCheckpoint(directory, model);
    expect(await codeOf(loadCheckpoint(join(scratch, 'absent')))).toBe('not_found');
    const bytes = await readFile(join(directory, checkpointWeightsFile));
    bytes[17] = (bytes[17] ?? 0) ^ 1;
    await writeFile(join(directory, checkpointWeightsFile), bytes);
    expect(await codeOf(loadCheckpoint(directory))).toBe('data_loss');

    const other = CausalLanguageModel.create(new TokenVocabulary([1, 2, 3]), smallConfig);
    await saveCheckpoint(join(scratch, 'other-vocabulary'), other);
    expect(await codeOf(loadWeightsFor(model, join(scratch, 'other-vocabulary')))).toBe(
      'failed_precondition',
    );
    const reseeded = CausalLanguageModel.create(vocabulary, { ...smallConfig, seed: 3 });
    await saveCheckpoint(join(scratch, 'reseeded'), reseeded);
    expect(await codeOf(loadWeightsFor(model, join(scratch, 'reseeded')))).toBe('resolved');
    await writeFile(join(scratch, 'reseeded', 'embedded-model.json'), '{"format": "something else"}');
    expect(await codeOf(loadCheckpoint(join(scratch, 'reseeded')))).toBe('invalid_argument');
    for (const each of [model, other, reseeded]) each.dispose();
  });
});
