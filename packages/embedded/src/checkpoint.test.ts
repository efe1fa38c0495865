import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer } from '@dressage/tito';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen3ModelDirectory, smallConfig, testVocabulary } from './__fixtures__/embedded-fixture.js';
import { initializeBackend } from './backend.js';
import {
  checkpointManifestFile,
  checkpointSafetensorsFile,
  checkpointWeightsFile,
  loadCheckpoint,
  loadModel,
  loadWeightsFor,
  saveCheckpoint,
  weightsEqual,
} from './checkpoint.js';
import { CausalLanguageModel } from './model.js';
import { decodeSafetensors, encodeSafetensors } from './safetensors.js';
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
    const bytes = await readFile(join(directory, checkpointSafetensorsFile));
    bytes[bytes.length - 5] = (bytes[bytes.length - 5] ?? 0) ^ 1;
    await writeFile(join(directory, checkpointSafetensorsFile), bytes);
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

  it('store the weights as safetensors that name every parameter', async () => {
    const vocabulary = await testVocabulary();
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const directory = join(scratch, 'safetensors');
    await saveCheckpoint(directory, model, { weightVersion: '4' });
    const bytes = await readFile(join(directory, checkpointSafetensorsFile));
    const headerLength = Number(bytes.readBigUInt64LE(0));
    expect((8 + headerLength) % 8).toBe(0);
    const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8')) as Record<
      string,
      { dtype: string; shape: number[]; data_offsets: [number, number] }
    >;
    expect(Object.keys(header).filter((name) => name !== '__metadata__')).toEqual(
      model.specs.map((spec) => spec.name),
    );
    const weights = model.getWeights();
    for (const spec of model.specs) {
      const entry = header[spec.name]!;
      expect(entry.dtype).toBe('F32');
      expect(entry.shape).toEqual(spec.shape);
      const [start, end] = entry.data_offsets;
      const raw = bytes.subarray(8 + headerLength + start, 8 + headerLength + end);
      const values = weights.get(spec.name)!;
      expect(Buffer.compare(raw, Buffer.from(values.buffer, values.byteOffset, values.byteLength))).toBe(0);
    }
    model.dispose();
  });

  it('still read the raw float32 layout written before safetensors', async () => {
    const vocabulary = await testVocabulary();
    const model = CausalLanguageModel.create(vocabulary, smallConfig);
    const directory = join(scratch, 'legacy');
    await mkdir(directory, { recursive: true });
    const weights = model.getWeights();
    const parts: Buffer[] = [];
    const tensors: Array<{ name: string; shape: number[]; offset: number; length: number }> = [];
    let offset = 0;
    for (const spec of model.specs) {
      const values = weights.get(spec.name)!;
      parts.push(Buffer.from(values.buffer, values.byteOffset, values.byteLength));
      tensors.push({ name: spec.name, shape: spec.shape, offset, length: values.length });
      offset += values.length;
    }
    const bytes = Buffer.concat(parts);
    await writeFile(join(directory, checkpointWeightsFile), bytes);
    await writeFile(
      join(directory, checkpointManifestFile),
      JSON.stringify({
        format: 'dressage.embedded.checkpoint/v1',
        model: model.config,
        vocabulary: Array.from(vocabulary.tokenIds),
        weight_version: 'old',
        tensors,
        sha256: createHash('sha256').update(bytes).digest('hex'),
      }),
    );
    const checkpoint = await loadCheckpoint(directory);
    expect(checkpoint.weightVersion).toBe('old');
    expect(weightsEqual(checkpoint.weights, weights)).toBe(true);
    model.dispose();
  });
});

describe('safetensors', () => {
  it('round-trips tensors and metadata, and refuses what it cannot read', () => {
    const tensors = [
      { name: 'a', shape: [2, 3], values: Float32Array.from([1, -2, 3.5, Number.NaN, 0, 1e-30]) },
      { name: 'b.c', shape: [1], values: Float32Array.from([7]) },
    ];
    const bytes = encodeSafetensors(tensors, { format: 'pt' });
    const decoded = decodeSafetensors(bytes);
    expect(decoded.metadata).toEqual({ format: 'pt' });
    expect(decoded.tensors.map((tensor) => [tensor.name, tensor.shape, Array.from(tensor.values)])).toEqual(
      tensors.map((tensor) => [tensor.name, tensor.shape, Array.from(tensor.values)]),
    );
    expect(() => decodeSafetensors(bytes.subarray(0, bytes.length - 1))).toThrow(/bytes .* do not hold/);
    expect(() => decodeSafetensors(bytes.subarray(0, 5))).toThrow(/shorter than/);
    const half = new TextEncoder().encode('{"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}');
    const f16 = new Uint8Array(8 + half.length + 2);
    new DataView(f16.buffer).setBigUint64(0, BigInt(half.length), true);
    f16.set(half, 8);
    expect(() => decodeSafetensors(f16)).toThrow(/only F32/);
  });
});
