import { appendFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { type PackedTrainBatch, type Sample, sampleMetadata } from '@dressage/protocol';

/**
 * One trained sample as a run exports it (`<output_dir>/samples/step-NNNNNN.jsonl`, one object per
 * line): exactly the token ids, loss mask, rollout logprobs and per-token weight versions the trainer
 * received, with the ids and metadata needed to find and explain it.
 */
export interface ExportedSample {
  step: number;
  session_id: string | null;
  instance_id: string | null;
  trajectory_id: string | null;
  segment_index: number;
  rollout_id: number | null;
  group_index: number | null;
  index: number | null;
  status: string;
  reward: number | null;
  remove_sample: boolean;
  /** All token ids (prompt and response). */
  tokens: number[];
  /** Tokens before the response (context only). */
  prompt_length: number;
  /** Over the response tokens (the tail of `tokens`). */
  loss_mask: number[];
  rollout_log_probs: number[];
  /** Over all tokens, when the proxy recorded versions. */
  full_versions: readonly string[] | null;
  /** The conversation the agent saw (the segment's last message snapshot). */
  messages: readonly unknown[];
  segment_reason: string | null;
  /** Why the segment ended: the engine's reason, or `segment_boundary` when its trajectory continued. */
  finish_reason: string | null;
  /** The response text the reward read. */
  response: string;
  metadata: Record<string, unknown>;
}

const heavyMetadataKeys = new Set(['messages', 'full_versions', 'proxy_extra_info']);

/** Converts a sample to its export form. */
export function exportSample(sample: Sample, step: number): ExportedSample {
  const metadata = sample.metadata;
  return {
    step,
    session_id: sampleMetadata.sessionId(sample) ?? sample.session_id ?? null,
    instance_id: sampleMetadata.instanceId(sample),
    trajectory_id: sampleMetadata.trajectoryId(sample),
    segment_index: sampleMetadata.segmentIndex(sample),
    rollout_id: sample.rollout_id,
    group_index: sample.group_index,
    index: sample.index,
    status: sample.status,
    reward: typeof sample.reward === 'number' ? sample.reward : null,
    remove_sample: sample.remove_sample,
    tokens: sample.tokens,
    prompt_length: sample.tokens.length - sample.response_length,
    loss_mask: sample.loss_mask ?? [],
    rollout_log_probs: sample.rollout_log_probs ?? [],
    full_versions: sampleMetadata.fullVersions(sample),
    messages: sampleMetadata.messages(sample),
    segment_reason: sampleMetadata.segmentReason(sample),
    finish_reason: sampleMetadata.finishReason(sample),
    response: sample.response,
    metadata: Object.fromEntries(Object.entries(metadata).filter(([key]) => !heavyMetadataKeys.has(key))),
  };
}

/** Appends a step's samples to `<directory>/samples/step-NNNNNN.jsonl`. */
export async function exportSamples(
  directory: string,
  step: number,
  samples: readonly Sample[],
): Promise<string> {
  const folder = join(directory, 'samples');
  await mkdir(folder, { recursive: true });
  const path = join(folder, `step-${String(step).padStart(6, '0')}.jsonl`);
  await appendFile(
    path,
    samples
      .map((sample) => JSON.stringify(exportSample(sample, step)))
      .join('\n')
      .concat('\n'),
  );
  return path;
}

/**
 * Appends the trainer's logprobs of a step's response tokens, one line per sample in the order of
 * `samples/step-NNNNNN.jsonl` (`null` where the token is not trained), to
 * `<directory>/samples/step-NNNNNN.trainer.jsonl`: with the rollout logprobs and versions exported
 * beside them, every token's off-policy gap can be read back.
 */
export async function exportTrainLogProbs(
  directory: string,
  step: number,
  batch: PackedTrainBatch,
  trainLogProbs: Float32Array,
): Promise<string> {
  const folder = join(directory, 'samples');
  await mkdir(folder, { recursive: true });
  const path = join(folder, `step-${String(step).padStart(6, '0')}.trainer.jsonl`);
  const lines: string[] = [];
  let offset = 0;
  for (let index = 0; index < batch.sample_count; index++) {
    const length = batch.response_lengths[index]!;
    const values = Array.from(trainLogProbs.subarray(offset, offset + length), (value) =>
      Number.isNaN(value) ? null : value,
    );
    lines.push(JSON.stringify({ step, sample: index, train_log_probs: values }));
    offset += length;
  }
  await appendFile(path, `${lines.join('\n')}\n`);
  return path;
}
