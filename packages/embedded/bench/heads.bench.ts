// What more attention heads cost at the weather recipe's shape (d_model 64, two layers, a 142-token
// prompt): eight heads of width 8 against four of width 16 (the baseline), the same parameters. A
// warm-start step (`sft_loss` through the EmbeddedTrainer, 16 sequences) and KV-cache decoding at batch 8,
// the two models interleaved step by step so both see the same machine load; medians.
// The last output line is one JSON object of headline figures.
import * as tf from '@tensorflow/tfjs';
import { packSequences } from '../src/__fixtures__/train-batch.js';
import { CausalLanguageModel, EmbeddedTrainer, initializeBackend, TokenVocabulary } from '../src/index.js';

// About the recipe's vocabulary (114 known ids) and shape.
const vocabulary = new TokenVocabulary([
  ...Array.from({ length: 100 }, (_, index) => index * 97),
  ...Array.from({ length: 26 }, (_, index) => 151643 + index),
]);
const shape = {
  modelDimension: 64,
  layerCount: 2,
  feedForwardDimension: 256,
  contextLength: 256,
  seed: 7,
};
const headCounts = { baseline: 4, candidate: 8 } as const;
type Arm = keyof typeof headCounts;
const arms = Object.keys(headCounts) as Arm[];

function sequences(rows: number, length: number): number[][] {
  return Array.from({ length: rows }, (_, row) =>
    Array.from(
      { length },
      (_, position) => vocabulary.tokenIds[(row * 31 + position * 7) % vocabulary.outputCount]!,
    ),
  );
}

function median(values: number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
}

/** Seconds of one batched decode step of `rows` sequences (after their prefill). */
function decodeStepSeconds(model: CausalLanguageModel, rows: number[][], steps: number): number[] {
  const batch = model.createDecodeBatch<number>();
  rows.forEach((row, index) => {
    const { cache, logits } = model.prefill(vocabulary.slotsOf(row));
    logits.dispose();
    batch.add(index, cache);
  });
  const times: number[] = [];
  const next = rows.map((row) => vocabulary.slotOf(row.at(-1)!));
  for (let step = 0; step < steps; step++) {
    const started = performance.now();
    tf.tidy(() => batch.step(next).dataSync());
    times.push((performance.now() - started) / 1000);
  }
  batch.clear();
  return times;
}

await initializeBackend({ backend: 'wasm', log: (line) => console.log(line) });
const models = Object.fromEntries(
  arms.map((arm) => [arm, CausalLanguageModel.create(vocabulary, { ...shape, headCount: headCounts[arm] })]),
) as Record<Arm, CausalLanguageModel>;
const trainers = Object.fromEntries(
  arms.map((arm) => [arm, new EmbeddedTrainer({ model: models[arm], learningRate: 1e-3 })]),
) as Record<Arm, EmbeddedTrainer>;
console.log(
  `wasm: ${models.baseline.parameterCount} parameters either way; baseline ${headCounts.baseline} heads, candidate ${headCounts.candidate}`,
);

// The warm-start learns the completion only: about the last 10 tokens of each example.
const batch = packSequences(
  null,
  sequences(16, 150).map((tokens) => ({ tokens, responseLength: 10 })),
);
const sft = { loss: { loss_type: 'sft_loss' as const } };
const trainTimes: Record<Arm, number[]> = { baseline: [], candidate: [] };
for (const arm of arms) await trainers[arm].train(sft, batch);
for (let round = 0; round < 15; round++) {
  for (const arm of arms) {
    const started = performance.now();
    await trainers[arm].train(sft, batch);
    trainTimes[arm].push((performance.now() - started) / 1000);
  }
}
const decodeTimes: Record<Arm, number[]> = { baseline: [], candidate: [] };
for (let round = 0; round < 6; round++) {
  for (const arm of arms) decodeTimes[arm].push(...decodeStepSeconds(models[arm], sequences(8, 142), 12));
}

const round = (value: number, digits = 2) => Number(value.toFixed(digits));
const figures = Object.fromEntries(
  arms.map((arm) => [
    arm,
    {
      heads: headCounts[arm],
      warm_start_step_seconds: round(median(trainTimes[arm]), 4),
      decode_tokens_per_second: round(8 / median(decodeTimes[arm]), 0),
    },
  ]),
) as Record<Arm, { heads: number; warm_start_step_seconds: number; decode_tokens_per_second: number }>;
for (const arm of arms) {
  const figure = figures[arm];
  console.log(
    `  ${figure.heads} heads: warm-start step (16 x 150 tokens) ${figure.warm_start_step_seconds.toFixed(4)} s, ` +
      `decode at batch 8 ${figure.decode_tokens_per_second} tokens/s`,
  );
}
const headline = {
  ...figures,
  eight_over_four_warm_start_step_time: round(
    figures.candidate.warm_start_step_seconds / figures.baseline.warm_start_step_seconds,
  ),
  eight_over_four_decode_tokens_per_second: round(
    figures.candidate.decode_tokens_per_second / figures.baseline.decode_tokens_per_second,
  ),
};
console.log(
  `eight heads / four: warm-start step time ${headline.eight_over_four_warm_start_step_time}x, ` +
    `decode throughput ${headline.eight_over_four_decode_tokens_per_second}x`,
);
for (const arm of arms) {
  await trainers[arm].dispose();
  models[arm].dispose();
}
console.log(JSON.stringify(headline));
