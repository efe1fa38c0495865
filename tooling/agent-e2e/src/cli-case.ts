import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Sample } from '@dressage/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliEndToEnd, type CliType, rewardFromCheck, task, trainOnce } from './harness.js';

type Json = Record<string, unknown>;

/** What the README table states for one CLI's one-task trajectory. */
export interface Expected {
  /** Segments the proxy records for the task, and the reason each starts with. */
  segmentReasons: string[];
  /** The same for three tool-using turns in one session. */
  threeTurnReasons: string[];
}

/**
 * The end-to-end test of one CLI: one task (turn 1 a tool call that writes a file, turn 2 a short
 * answer) through the blackbox generate function, then reward, packing and one `Train` call.
 */
export function describeCli(type: CliType, expected: Expected, backendOptions: Json = {}): void {
  describe(`${type}: real CLI, real sandbox, real proxy, embedded trainer`, () => {
    let run: CliEndToEnd | null = null;
    let skipReason: string | null = null;

    beforeAll(async () => {
      const started = await CliEndToEnd.start(type, backendOptions);
      if (typeof started === 'string') {
        skipReason = started;
        console.warn(`[agent-e2e] skipping ${type}: ${skipReason}`);
      } else run = started;
    }, 900_000);
    afterAll(async () => {
      await run?.close();
    });

    it('writes the file in its sandbox; the proxy records exact tokens; one Train step succeeds', async (context) => {
      if (run === null) return context.skip(skipReason ?? 'not started');
      const file = `proof-${type}.txt`;
      const word = `sandboxed-${type.replace('_', '-')}`;
      const samples = await run.generate()(run.sample(file, word));
      const first = samples[0] as Sample;
      expect(first.status, JSON.stringify(first.metadata)).not.toBe('aborted');

      // The tool ran in the slot: the after_agent check found the file in /workspace, the host has none.
      expect(
        rewardFromCheck(first),
        JSON.stringify({
          cmds: first.metadata.execute_cmds,
          replies: run.model.replies.map((r) => [r.kind, r.tools.length]),
        }),
      ).toBe(1);
      expect(existsSync(join(process.cwd(), file))).toBe(false);
      expect(existsSync(join('/workspace', file))).toBe(false);

      // The model acted: a tool call, then a final answer, each the engine's exact ids and logprobs.
      const replies = run.model.taskReplies;
      expect(replies.map((reply) => reply.kind)).toEqual(['tool_call', 'final']);
      const all = samples.map((sample) => ({ sample, start: sample.tokens.length - sample.response_length }));
      for (const reply of replies) {
        const holder = all.find(({ sample, start }) => indexOfRun(sample.tokens, reply.ids, start) !== -1);
        expect(holder, `reply ${reply.kind} not found in any sample`).toBeDefined();
        const { sample, start } = holder as { sample: Sample; start: number };
        const at = indexOfRun(sample.tokens, reply.ids, start) - start;
        // Model tokens train (mask 1) with the engine's own logprobs.
        expect(sample.loss_mask?.slice(at, at + reply.ids.length)).toEqual(reply.ids.map(() => 1));
        expect(sample.rollout_log_probs?.slice(at, at + reply.ids.length)).toEqual(reply.logprobs);
      }
      for (const sample of samples) {
        const start = sample.tokens.length - sample.response_length;
        const mask = sample.loss_mask ?? [];
        // Everything in the response that the model did not produce is context: the tool result.
        const modelPositions = new Set<number>();
        for (const reply of replies) {
          const at = indexOfRun(sample.tokens, reply.ids, start);
          if (at !== -1)
            for (let index = 0; index < reply.ids.length; index++) modelPositions.add(at - start + index);
        }
        mask.forEach((bit, index) => {
          expect(bit, `mask at response position ${index}`).toBe(modelPositions.has(index) ? 1 : 0);
        });
        // Weight versions: the engine's on every model token, none on context.
        const versions = (sample.metadata.full_versions ?? []) as string[];
        expect(versions).toHaveLength(sample.tokens.length);
        mask.forEach((bit, index) => {
          expect(versions[start + index]).toBe(bit === 1 ? 'v1' : '-1');
        });
      }
      expect(samples.map((sample) => segmentReason(sample))).toEqual(expected.segmentReasons);

      // Reward, packing, one Train call on the embedded trainer.
      const rewarded = samples.map((sample) => ({ ...sample, reward: rewardFromCheck(first) }));
      const result = await trainOnce(rewarded);
      expect(result.optimizer_steps).toBe(1);
    }, 600_000);

    it('three tool-using turns: segments and boundary reasons as the README states', async (context) => {
      if (run === null) return context.skip(skipReason ?? 'not started');
      const before = run.model.replies.length;
      const turns = [1, 2, 3].map((index) => task(`turn-${index}.txt`, `word-${index}`));
      const { turns: statuses, segments } = await run.runTurns(turns);
      expect(statuses.map((status) => status.status)).toEqual(['committed', 'committed', 'committed']);
      const replies = run.model.replies.slice(before);
      const reasons = segments.map((segment) => segment.extra_info.segment_reason);
      // The measured row of the README table.
      console.log(
        `[agent-e2e] ${type}: ${JSON.stringify({
          requests: replies.length,
          side_requests: replies.filter((reply) => reply.kind === 'side').length,
          system_prompt_tokens: replies[0]?.systemTokens,
          tools: replies[0]?.tools.length,
          first_prompt_tokens: replies[0]?.promptTokens,
          segments: reasons,
          reasons: segments.map((segment) => segment.extra_info.segment_reasons),
        })}`,
      );
      expect(replies.filter((reply) => reply.kind !== 'side').map((reply) => reply.kind)).toEqual([
        'tool_call',
        'final',
        'tool_call',
        'final',
        'tool_call',
        'final',
      ]);
      expect(reasons).toEqual(expected.threeTurnReasons);
    }, 900_000);
  });
}

/** The reason the proxy gave for a sample's segment boundary (`initial` for a lineage's first). */
export function segmentReason(sample: Sample): string {
  const extra = (sample.metadata.proxy_extra_info ?? {}) as Json;
  return String(extra.segment_reason ?? 'unknown');
}

/** Where `run` starts in `tokens` at or after `from`, else -1. */
export function indexOfRun(tokens: readonly number[], run: readonly number[], from = 0): number {
  outer: for (let start = from; start + run.length <= tokens.length; start++) {
    for (let index = 0; index < run.length; index++) if (tokens[start + index] !== run[index]) continue outer;
    return start;
  }
  return -1;
}
