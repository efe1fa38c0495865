// Decode throughput of the embedded model: KV cache against recomputing the whole prefix per token,
// at batch 1, 8 and 32, on the wasm and cpu backends; plus logprob parity, a supervised step and a
// policy-loss Train step of the EmbeddedTrainer, plain and with the KL loss and entropy bonus (step
// time as a ratio to the plain step, measured in the same run on the same batch).
// The last output line is one JSON object of headline figures.
import type { LossConfig } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { packSequences } from '../src/__fixtures__/train-batch.js';
import {
  type BackendName,
  CausalLanguageModel,
  EmbeddedTrainer,
  initializeBackend,
  SupervisedTrainer,
  TokenVocabulary,
} from '../src/index.js';

// A vocabulary of the size a tool-call recipe over the Qwen3 tokenizer needs (ids seen plus specials).
const vocabulary = new TokenVocabulary([
  ...Array.from({ length: 1000 }, (_, index) => index * 97),
  ...Array.from({ length: 26 }, (_, index) => 151643 + index),
]);
const config = {
  modelDimension: 64,
  layerCount: 2,
  headCount: 4,
  feedForwardDimension: 256,
  contextLength: 512,
  seed: 1,
};

interface Plan {
  promptLength: number;
  newTokens: number;
  batches: number[];
}

// The pure-JS cpu backend is an order of magnitude slower: fewer tokens keep the run short.
const plans: Record<BackendName, Plan> = {
  wasm: { promptLength: 64, newTokens: 32, batches: [1, 8, 32] },
  cpu: { promptLength: 32, newTokens: 8, batches: [1, 8, 32] },
};

function prompts(batch: number, length: number): number[][] {
  return Array.from({ length: batch }, (_, row) =>
    Array.from(
      { length },
      (_, position) => vocabulary.tokenIds[(row * 31 + position * 7) % vocabulary.outputCount]!,
    ),
  );
}

function argmaxRows(logprobs: Float32Array, rows: number): number[] {
  const outputs = vocabulary.outputCount;
  return Array.from({ length: rows }, (_, row) => {
    let best = 0;
    for (let index = 1; index < outputs; index++) {
      if (logprobs[row * outputs + index]! > logprobs[row * outputs + best]!) best = index;
    }
    return best;
  });
}

/** Greedy decoding with the KV cache; returns tokens/s and every sequence with its logprobs. */
function decodeWithCache(model: CausalLanguageModel, rows: number[][], newTokens: number) {
  const sequences = rows.map((row) => [...row]);
  const logprobs: number[][] = rows.map(() => []);
  const batch = model.createDecodeBatch<number>();
  const outputs = vocabulary.outputCount;
  rows.forEach((row, index) => {
    const { cache, logits } = model.prefill(vocabulary.slotsOf(row));
    const values = tf.tidy(() => tf.logSoftmax(logits).dataSync() as Float32Array);
    logits.dispose();
    batch.add(index, cache);
    const chosen = argmaxRows(values, 1)[0]!;
    sequences[index]!.push(vocabulary.tokenIdOfOutputClass(chosen));
    logprobs[index]!.push(values[chosen]!);
  });
  const started = performance.now();
  for (let step = 1; step < newTokens; step++) {
    const values = tf.tidy(() => {
      const logits = batch.step(sequences.map((sequence) => vocabulary.slotOf(sequence.at(-1)!)));
      return tf.logSoftmax(logits).dataSync() as Float32Array;
    });
    argmaxRows(values, rows.length).forEach((chosen, row) => {
      sequences[row]!.push(vocabulary.tokenIdOfOutputClass(chosen));
      logprobs[row]!.push(values[row * outputs + chosen]!);
    });
  }
  const seconds = (performance.now() - started) / 1000;
  batch.clear();
  return { tokensPerSecond: ((newTokens - 1) * rows.length) / seconds, sequences, logprobs };
}

/** Greedy decoding that re-reads the whole prefix for every token (no cache). */
function decodeWithoutCache(model: CausalLanguageModel, rows: number[][], newTokens: number): number {
  const sequences = rows.map((row) => [...row]);
  const step = () => {
    const values = tf.tidy(() => {
      const slots = tf.tensor2d(
        sequences.flatMap((sequence) => Array.from(vocabulary.slotsOf(sequence))),
        [sequences.length, sequences[0]!.length],
        'int32',
      );
      return tf.logSoftmax(model.lastLogitsWithoutCache(slots)).dataSync() as Float32Array;
    });
    argmaxRows(values, rows.length).forEach((chosen, row) => {
      sequences[row]!.push(vocabulary.tokenIdOfOutputClass(chosen));
    });
  };
  step();
  const started = performance.now();
  for (let index = 1; index < newTokens; index++) step();
  return ((newTokens - 1) * rows.length) / ((performance.now() - started) / 1000);
}

function trainTokensPerSecond(model: CausalLanguageModel, steps: number): number {
  const trainer = new SupervisedTrainer(model);
  const examples = prompts(8, 128).map((tokenIds) => ({ tokenIds }));
  trainer.step(examples);
  const started = performance.now();
  for (let step = 0; step < steps; step++) trainer.step(examples);
  const seconds = (performance.now() - started) / 1000;
  trainer.dispose();
  return (steps * 8 * 127) / seconds;
}

// The policy-loss variants timed against the plain step.
const lossVariants = {
  plain: {},
  kl: { use_kl_loss: true, kl_loss_coef: 0.01, kl_loss_type: 'low_var_kl' },
  entropy: { entropy_coef: 0.01 },
  kl_entropy: { use_kl_loss: true, kl_loss_coef: 0.01, kl_loss_type: 'low_var_kl', entropy_coef: 0.01 },
} satisfies Record<string, LossConfig>;
type LossVariant = keyof typeof lossVariants;

/**
 * Policy-loss Train steps (8 samples of 128 tokens, 64 of them response) through the
 * EmbeddedTrainer, one trainer per loss variant on the same batch, steps interleaved so every
 * variant sees the same machine load: the median seconds per step of each.
 */
async function policyTrainStepSeconds(
  model: CausalLanguageModel,
  steps: number,
): Promise<{ seconds: Record<LossVariant, number>; tokens: number }> {
  const names = Object.keys(lossVariants) as LossVariant[];
  const trainers = names.map(() => new EmbeddedTrainer({ model, learningRate: 1e-4 }));
  const batch = packSequences(
    model,
    prompts(8, 128).map((tokens, index) => ({
      tokens,
      responseLength: 64,
      reward: index % 2 === 0 ? 1 : -1,
    })),
  );
  const times = Object.fromEntries(names.map((name) => [name, [] as number[]])) as Record<
    LossVariant,
    number[]
  >;
  // The first step of each warms up (and freezes the KL reference).
  for (const [index, name] of names.entries())
    await trainers[index]!.train({ loss: lossVariants[name] }, batch);
  for (let step = 0; step < steps; step++) {
    for (const [index, name] of names.entries()) {
      const started = performance.now();
      await trainers[index]!.train({ loss: lossVariants[name] }, batch);
      times[name].push((performance.now() - started) / 1000);
    }
  }
  for (const trainer of trainers) await trainer.dispose();
  const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
  const seconds = Object.fromEntries(names.map((name) => [name, median(times[name])])) as Record<
    LossVariant,
    number
  >;
  return { seconds, tokens: batch.tokens.length };
}

const round = (value: number, digits = 1) => Number(value.toFixed(digits));
const headline: Record<string, unknown> = { model: { ...config, outputs: vocabulary.outputCount } };

for (const backend of ['wasm', 'cpu'] as const) {
  await initializeBackend({ backend, log: (line) => console.log(line) });
  const model = CausalLanguageModel.create(vocabulary, config);
  const plan = plans[backend];
  const results: Record<string, unknown> = {};
  console.log(
    `${backend}: ${model.parameterCount} parameters, prompt ${plan.promptLength}, ${plan.newTokens} new tokens per row`,
  );
  decodeWithCache(model, prompts(2, 8), 3);
  for (const batch of plan.batches) {
    const rows = prompts(batch, plan.promptLength);
    const cached = decodeWithCache(model, rows, plan.newTokens);
    const recomputed = decodeWithoutCache(model, rows, plan.newTokens);
    const speedup = cached.tokensPerSecond / recomputed;
    results[`batch${batch}`] = {
      kv_cache_tokens_per_second: round(cached.tokensPerSecond),
      recompute_tokens_per_second: round(recomputed),
      kv_cache_speedup: round(speedup, 2),
    };
    console.log(
      `  batch ${String(batch).padStart(2)}: KV cache ${cached.tokensPerSecond.toFixed(0).padStart(6)} tokens/s, ` +
        `recompute ${recomputed.toFixed(0).padStart(6)} tokens/s, speedup ${speedup.toFixed(2)}x`,
    );
    if (batch === 8) {
      // Logprobs taken while decoding against one full forward pass over the finished sequences.
      const reference = model.sequenceLogprobs(cached.sequences);
      let maxDiff = 0;
      cached.logprobs.forEach((row, index) => {
        row.forEach((value, step) => {
          const position = plan.promptLength - 1 + step;
          maxDiff = Math.max(maxDiff, Math.abs(value - reference[index]![position]!));
        });
      });
      results.parity_max_abs_diff = maxDiff;
      console.log(`  parity: max |sampling-time logprob - full forward| = ${maxDiff.toExponential(2)}`);
    }
  }
  const trainRate = trainTokensPerSecond(model, backend === 'wasm' ? 3 : 1);
  results.train_tokens_per_second = round(trainRate);
  console.log(`  supervised Adam step (8 x 128 tokens): ${trainRate.toFixed(0)} tokens/s`);
  const policy = await policyTrainStepSeconds(model, backend === 'wasm' ? 9 : 3);
  const policyRate = policy.tokens / policy.seconds.plain;
  results.policy_train_tokens_per_second = round(policyRate);
  console.log(`  policy-loss Train step (8 x 128 tokens, 64 response): ${policyRate.toFixed(0)} tokens/s`);
  const ratios: Record<string, number> = {};
  for (const name of ['kl', 'entropy', 'kl_entropy'] as const) {
    ratios[name] = round(policy.seconds[name] / policy.seconds.plain, 2);
  }
  results.policy_train_step_time_vs_plain = ratios;
  console.log(
    `  policy-loss Train step time vs plain: use_kl_loss ${ratios.kl}x, entropy_coef ${ratios.entropy}x, both ${ratios.kl_entropy}x`,
  );
  model.dispose();
  headline[backend] = results;
}

const wasm = headline.wasm as Record<string, { kv_cache_tokens_per_second: number }>;
const cpu = headline.cpu as Record<string, { kv_cache_tokens_per_second: number }>;
headline.wasm_over_cpu_batch8 = round(
  wasm.batch8!.kv_cache_tokens_per_second / cpu.batch8!.kv_cache_tokens_per_second,
  2,
);
console.log(`wasm / cpu decode at batch 8: ${headline.wasm_over_cpu_batch8}x`);
console.log(JSON.stringify(headline));
