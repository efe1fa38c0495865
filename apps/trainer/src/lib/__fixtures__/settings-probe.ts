// A convert hook, rollout log functions and a whitebox agent that report what reached the run: the
// samples the conversion is given (after expansion), the batch it makes, the model requests of a
// whitebox run and the report written so far, for the settings test.
import { existsSync } from 'node:fs';
import { WhiteboxAgent, type WhiteboxRunContext } from '@dressage/paddock';
import type { PackedTrainBatch, Sample } from '@dressage/protocol';
import { type ConvertOptions, convertSamplesToPackedTrainBatch } from '@dressage/trainer-bridge';

let seen: Record<string, number> = {};

export function convert(samples: Sample[], options: ConvertOptions): PackedTrainBatch {
  const batch = convertSamplesToPackedTrainBatch(samples, options);
  const live = samples.filter((sample) => !sample.remove_sample);
  seen = {
    'probe/samples': samples.length,
    'probe/live_samples': live.length,
    'probe/longest_input': Math.max(0, ...live.map((sample) => sample.tokens.length)),
    'probe/shortest_prompt': Math.min(...live.map((sample) => sample.tokens.length - sample.response_length)),
    'probe/capped_inputs': live.filter((sample) => sample.metadata.truncated === true).length,
    'probe/longest_trained': Math.max(0, ...Array.from(batch.total_lengths)),
    'probe/truncated_trained': Array.from(batch.truncated).filter((value) => value === 1).length,
    'probe/most_turns': Math.max(0, ...samples.map((sample) => Number(sample.metadata.turns ?? 0))),
    'probe/refused_samples': samples.filter((sample) => sample.metadata.refused === 'resource_exhausted')
      .length,
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

/**
 * A whitebox agent that asks the model again and again until `context.chat` refuses, recording the
 * requests it made and why it stopped.
 */
export class AskUntilRefused extends WhiteboxAgent {
  async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    let turns = 0;
    let last = '';
    try {
      for (;;) {
        const reply = await context.chat({ messages: [{ role: 'user', content: String(sample.prompt) }] });
        turns += 1;
        const choices = reply.choices as { message?: { content?: string | null } }[] | undefined;
        last = choices?.[0]?.message?.content ?? '';
        // A bound of our own, far above any max_turns a test sets.
        if (turns >= 50) break;
      }
    } catch (error) {
      context.metadata.refused = (error as { code?: string }).code ?? 'unknown';
    }
    context.metadata.turns = turns;
    return last;
  }
}

/** Rollout log of the run settings: requests per whitebox run, and whether a report was written. */
export function runLog(): Record<string, number> {
  const report = process.env.DRESSAGE_SETTINGS_PROBE_REPORT;
  return {
    ...seen,
    'probe/report_written': report !== undefined && existsSync(report) ? 1 : 0,
  };
}
