// Converts a large batch of samples into a packed TrainBatch and compares it with a plain typed-array
// copy of the same output bytes (allocation included, like the conversion's), measured in the same run;
// a copy into preallocated arrays is reported too, as a stricter reference.
//
//   node --import tsx --expose-gc bench/convert.bench.ts [--samples 100000 --tokens 2048 --segments 4]
//
// The last output line is one JSON object of headline figures; `--json-out FILE` also writes it to FILE
// (the package's `bench` script merges it into the transfer benchmark's last line).
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { createSample, type PackedTrainBatch, type Sample } from '@dressage/protocol';
import { convertSamplesToPackedTrainBatch } from '../src/index.js';

const { values } = parseArgs({
  options: {
    samples: { type: 'string', default: '100000' },
    tokens: { type: 'string', default: '2048' },
    segments: { type: 'string', default: '4' },
    'prompt-tokens': { type: 'string', default: '512' },
    repeats: { type: 'string', default: '5' },
    'group-size': { type: 'string', default: '8' },
    'json-out': { type: 'string' },
  },
});
const sampleCount = Number(values.samples);
const tokensPerSample = Number(values.tokens);
const segmentsPerTrajectory = Number(values.segments);
const promptTokens = Math.min(Number(values['prompt-tokens']), tokensPerSample - 1);
const repeats = Number(values.repeats);
const groupSize = Number(values['group-size']);
const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error('run with --expose-gc (the package script does) so memory figures are meaningful');
}

// A small deterministic generator, so runs are comparable.
let state = 0x9e3779b9;
function random(): number {
  state ^= state << 13;
  state ^= state >>> 17;
  state ^= state << 5;
  return (state >>> 0) / 4294967296;
}

function buildSamples(): Sample[] {
  const samples: Sample[] = new Array(sampleCount);
  const template = createSample({});
  const responseLength = tokensPerSample - promptTokens;
  for (let i = 0; i < sampleCount; i++) {
    const trajectory = Math.floor(i / segmentsPerTrajectory);
    const tokens: number[] = [];
    for (let t = 0; t < tokensPerSample; t++) tokens.push((random() * 151_000) | 0);
    const mask: (0 | 1)[] = [];
    const logprobs: number[] = [];
    for (let t = 0; t < responseLength; t++) {
      // Alternating runs of model output and tool output, like an agent turn.
      const trainable = (t >> 6) % 3 !== 2 ? 1 : 0;
      mask.push(trainable);
      logprobs.push(trainable ? -random() * 2 : 0);
    }
    const prompt = Math.floor(trajectory / groupSize);
    samples[i] = {
      ...template,
      index: i,
      group_index: prompt,
      rollout_id: trajectory,
      tokens,
      response_length: responseLength,
      loss_mask: mask,
      rollout_log_probs: logprobs,
      reward: i % segmentsPerTrajectory === segmentsPerTrajectory - 1 ? random() : 0,
      status: 'completed',
      metadata: {
        parent_traj_id: `trajectory-${trajectory}`,
        instance_id: `prompt-${prompt}`,
        segment_index: i % segmentsPerTrajectory,
      },
    };
  }
  return samples;
}

function packedBytes(packed: PackedTrainBatch): number {
  let total = 0;
  for (const value of Object.values(packed)) {
    if (ArrayBuffer.isView(value)) total += value.byteLength;
  }
  return total;
}

function copyPacked(packed: PackedTrainBatch): PackedTrainBatch {
  return {
    sample_count: packed.sample_count,
    tokens: packed.tokens.slice(),
    total_lengths: packed.total_lengths.slice(),
    response_lengths: packed.response_lengths.slice(),
    loss_masks: packed.loss_masks.slice(),
    rollout_log_probs: packed.rollout_log_probs?.slice() ?? null,
    teacher_log_probs: packed.teacher_log_probs?.slice() ?? null,
    rollout_ids: packed.rollout_ids.slice(),
    rewards: packed.rewards.slice(),
    raw_rewards: packed.raw_rewards.slice(),
    rollout_mask_sums: packed.rollout_mask_sums.slice(),
    truncated: packed.truncated.slice(),
    sample_indices: packed.sample_indices.slice(),
  };
}

// Best of the repeats: other processes on a shared machine only ever add time.
// The same copy into arrays allocated (and touched) beforehand: pure memory bandwidth, no page faults.
function copyPackedInto(packed: PackedTrainBatch, target: PackedTrainBatch): void {
  for (const [key, value] of Object.entries(packed)) {
    if (ArrayBuffer.isView(value)) {
      (target[key as keyof PackedTrainBatch] as Int32Array).set(value as Int32Array);
    }
  }
}

function best(values: number[]): number {
  return Math.min(...values);
}

const mib = (bytes: number) => bytes / 1024 / 1024;

const buildStart = performance.now();
const samples = buildSamples();
const options = { globalBatchSize: Math.max(1, Math.floor(sampleCount / segmentsPerTrajectory)) };
console.log(
  `built ${sampleCount} samples × ${tokensPerSample} tokens (${segmentsPerTrajectory} segments per trajectory) in ${((performance.now() - buildStart) / 1000).toFixed(1)} s`,
);

// Memory: the peak resident size during the first conversion, over the resident size just before it.
gc?.();
const residentBefore = process.memoryUsage().rss;
const maxResidentBefore = process.resourceUsage().maxRSS * 1024;
let start = performance.now();
let packed: PackedTrainBatch | null = convertSamplesToPackedTrainBatch(samples, options);
const conversionTimes = [performance.now() - start];
const maxResidentAfter = process.resourceUsage().maxRSS * 1024;
const outputBytes = packedBytes(packed);
const tokenCount = packed.tokens.length;
// When the earlier peak (building the inputs) was higher, the conversion's own peak is at most that.
const peakGrowth = Math.max(maxResidentAfter, maxResidentBefore) - residentBefore;
const peakGrowthIsUpperBound = maxResidentAfter <= maxResidentBefore;

for (let run = 1; run < repeats; run++) {
  packed = null;
  gc?.();
  start = performance.now();
  packed = convertSamplesToPackedTrainBatch(samples, options);
  conversionTimes.push(performance.now() - start);
}
const copyTimes: number[] = [];
for (let run = 0; run < repeats; run++) {
  gc?.();
  start = performance.now();
  const copy = copyPacked(packed as PackedTrainBatch);
  copyTimes.push(performance.now() - start);
  if (copy.tokens.length !== tokenCount) throw new Error('copy lost tokens');
}

const target = copyPacked(packed as PackedTrainBatch);
const preallocatedTimes: number[] = [];
for (let run = 0; run < repeats; run++) {
  start = performance.now();
  copyPackedInto(packed as PackedTrainBatch, target);
  preallocatedTimes.push(performance.now() - start);
}

const conversionSeconds = best(conversionTimes) / 1000;
const copySeconds = best(copyTimes) / 1000;
const conversionTokensPerSecond = tokenCount / conversionSeconds;
const copyTokensPerSecond = tokenCount / copySeconds;
const throughputRatio = conversionTokensPerSecond / copyTokensPerSecond;
const preallocatedTokensPerSecond = tokenCount / (best(preallocatedTimes) / 1000);
const preallocatedRatio = conversionTokensPerSecond / preallocatedTokensPerSecond;
const memoryRatio = peakGrowth / outputBytes;

console.log(`packed output: ${mib(outputBytes).toFixed(0)} MiB for ${tokenCount} tokens`);
console.log(
  `convert: ${(conversionTokensPerSecond / 1e6).toFixed(1)} M tokens/s (best of ${repeats}: ${conversionTimes.map((t) => t.toFixed(0)).join(', ')} ms)`,
);
console.log(
  `typed-array copy: ${(copyTokensPerSecond / 1e6).toFixed(1)} M tokens/s (best of ${repeats}: ${copyTimes.map((t) => t.toFixed(0)).join(', ')} ms)`,
);
console.log(
  `copy into preallocated arrays: ${(preallocatedTokensPerSecond / 1e6).toFixed(1)} M tokens/s (best of ${repeats}: ${preallocatedTimes.map((t) => t.toFixed(0)).join(', ')} ms)`,
);
console.log(`throughput ratio convert / copy: ${(throughputRatio * 100).toFixed(1)}% (target ≥ 25%)`);
console.log(
  `throughput ratio convert / copy into preallocated arrays: ${(preallocatedRatio * 100).toFixed(1)}% (stricter: the conversion allocates its output, this copy does not)`,
);
console.log(
  `peak memory growth during conversion: ${mib(peakGrowth).toFixed(0)} MiB = ${memoryRatio.toFixed(2)}× the packed output${peakGrowthIsUpperBound ? ' (upper bound)' : ''} (target ≤ 2×)`,
);
const headline = JSON.stringify({
  samples: sampleCount,
  tokens_per_sample: tokensPerSample,
  segments_per_trajectory: segmentsPerTrajectory,
  tokens: tokenCount,
  convert_tokens_per_second: Math.round(conversionTokensPerSecond),
  copy_tokens_per_second: Math.round(copyTokensPerSecond),
  throughput_ratio: Number(throughputRatio.toFixed(4)),
  preallocated_copy_tokens_per_second: Math.round(preallocatedTokensPerSecond),
  preallocated_throughput_ratio: Number(preallocatedRatio.toFixed(4)),
  packed_output_bytes: outputBytes,
  peak_memory_growth_bytes: peakGrowth,
  memory_ratio: Number(memoryRatio.toFixed(3)),
  meets_throughput_target: throughputRatio >= 0.25,
  meets_memory_target: memoryRatio <= 2,
});
console.log(headline);
if (values['json-out'] !== undefined) writeFileSync(values['json-out'], headline);
