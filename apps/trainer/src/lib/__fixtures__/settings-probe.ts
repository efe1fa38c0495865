// A convert hook and a rollout log function that report what reached the run: the samples the
// conversion is given (after expansion) and the batch it makes, for the settings test.
import type { PackedTrainBatch, Sample } from '@dressage/protocol';
import { type ConvertOptions, convertSamplesToPackedTrainBatch } from '@dressage/trainer-bridge';

let seen: Record<string, number> = {};

export function convert(samples: Sample[], options: ConvertOptions): PackedTrainBatch {
  const batch = convertSamplesToPackedTrainBatch(samples, options);
  const live = samples.filter((sample) => !sample.remove_sample);
  seen = {
    'probe/live_samples': live.length,
    'probe/longest_input': Math.max(0, ...live.map((sample) => sample.tokens.length)),
    'probe/shortest_prompt': Math.min(...live.map((sample) => sample.tokens.length - sample.response_length)),
    'probe/capped_inputs': live.filter((sample) => sample.metadata.truncated === true).length,
    'probe/longest_trained': Math.max(0, ...Array.from(batch.total_lengths)),
    'probe/truncated_trained': Array.from(batch.truncated).filter((value) => value === 1).length,
    'probe/mask_nonlast_segments': live.filter(
      (sample) =>
        (sample.metadata.proxy_extra_info as Record<string, unknown> | undefined)
          ?.mask_nonlast_version_tokens === true,
    ).length,
  };
  return batch;
}

export function rolloutLog(): Record<string, number> {
  return seen;
}
