// Train throughput on one batch: the PyTorch actor (`--actor torch`, CPU) with 1 and 2 data-parallel
// processes, against the embedded tfjs trainer (wasm) on the same batch and model, in one run.
// Tokens per second count every token of the batch (prompt and response), as the embedded bench
// does; ratios are against the embedded trainer measured here. The last line is one JSON object.
import { mkdtemp, rm } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  CausalLanguageModel,
  defaultModelConfig,
  EmbeddedTrainer,
  initializeBackend,
  saveCheckpoint,
  TokenVocabulary,
} from '@dressage/embedded';
import type { PackedTrainBatch } from '@dressage/protocol';
import { createTrainerClient } from '@dressage/trainer-bridge';
import { startWorker } from '../test/worker-process.js';

// The embedded bench's model: the default shape over a tool-call-sized vocabulary.
const vocabulary = new TokenVocabulary([
  ...Array.from({ length: 1000 }, (_, index) => index * 97),
  ...Array.from({ length: 26 }, (_, index) => 151643 + index),
]);
// The default shape (d_model 64, 2 layers, 4 heads, rotary, fan-in initialization).
const config = defaultModelConfig;
const samples = 16;
const tokensPerSample = 128;
const responseTokens = 64;
const steps = 4;

function batchOf(model: CausalLanguageModel): PackedTrainBatch {
  const sequences = Array.from({ length: samples }, (_, sample) =>
    Array.from(
      { length: tokensPerSample },
      (_, index) => vocabulary.tokenIds[(sample * 131 + index * 17) % 1026]!,
    ),
  );
  // The model's own logprobs as rollout logprobs: on-policy data, as an engine reports it.
  const logProbs = model.sequenceLogprobs(sequences).flatMap((row) => Array.from(row.slice(-responseTokens)));
  return {
    sample_count: samples,
    tokens: Int32Array.from(sequences.flat()),
    total_lengths: new Int32Array(samples).fill(tokensPerSample),
    response_lengths: new Int32Array(samples).fill(responseTokens),
    loss_masks: new Uint8Array(samples * responseTokens).fill(1),
    rollout_log_probs: Float32Array.from(logProbs),
    teacher_log_probs: null,
    rollout_ids: Int32Array.from({ length: samples }, (_, index) => index),
    rewards: Float32Array.from({ length: samples }, (_, index) => (index % 2 === 0 ? 1 : -1)),
    raw_rewards: Float32Array.from({ length: samples }, (_, index) => index % 2),
    rollout_mask_sums: new Float64Array(samples).fill(responseTokens),
    truncated: new Uint8Array(samples),
    sample_indices: Int32Array.from({ length: samples }, (_, index) => index),
  };
}

async function timed(step: () => Promise<unknown>): Promise<number> {
  await step();
  const started = performance.now();
  for (let index = 0; index < steps; index++) await step();
  return (steps * samples * tokensPerSample) / ((performance.now() - started) / 1000);
}

const backend = await initializeBackend({ backend: 'wasm' });
const model = CausalLanguageModel.create(vocabulary, config);
const batch = batchOf(model);
const scratch = await mkdtemp(join(tmpdir(), 'torch-bench-'));
await saveCheckpoint(join(scratch, 'model'), model, { weightVersion: '0' });
const loss = { learning_rate: 1e-4 };

const embedded = new EmbeddedTrainer({ model, learningRate: 1e-4 });
const embeddedRate = await timed(() => embedded.train({ global_batch_size: samples, loss }, batch));
await embedded.dispose();
console.log(`embedded tfjs (${backend}): ${embeddedRate.toFixed(0)} tokens/s`);

const cores = availableParallelism();
const results: Record<string, { tokens_per_second: number; vs_embedded: number; parity_max: number }> = {};
for (const [processes, threads] of [
  [1, cores],
  [1, 1],
  [2, Math.max(1, Math.floor(cores / 2))],
] as const) {
  const worker = await startWorker([
    '--actor',
    'torch',
    '--model',
    join(scratch, 'model'),
    '--processes',
    String(processes),
    '--threads',
    String(threads),
  ]);
  const client = createTrainerClient(worker.address);
  // Parity of the first (warm-up) step only: later steps train on weights the batch did not come from.
  let parity: number | null = null;
  try {
    const rate = await timed(async () => {
      const response = await client.train(batch, { global_batch_size: samples, loss });
      parity ??= response.metrics.train_rollout_logprob_abs_diff_max ?? Number.NaN;
    });
    const name = `torch_${processes}p_${threads}t`;
    results[name] = {
      tokens_per_second: Math.round(rate),
      vs_embedded: Number((rate / embeddedRate).toFixed(2)),
      parity_max: Number((parity ?? Number.NaN).toExponential(2)),
    };
    console.log(
      `torch, ${processes} process(es) × ${threads} thread(s): ${rate.toFixed(0)} tokens/s, ${(rate / embeddedRate).toFixed(2)}× embedded`,
    );
  } finally {
    client.close();
    await worker.stop();
  }
}
model.dispose();
await rm(scratch, { recursive: true, force: true });
console.log(
  JSON.stringify({
    batch: { samples, tokens_per_sample: tokensPerSample, response_tokens: responseTokens, steps },
    cores,
    embedded_tokens_per_second: Math.round(embeddedRate),
    ...results,
  }),
);
