// Known trajectories for the tests: real Qwen3 token ids, written with the proxy's own TrajectoryStore
// so the inspector reads exactly the on-disk format the proxy produces.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChatMessage, SegmentReason } from '@dressage/protocol';
import type { StoredTrajectory } from '@dressage/proxy/internal';
import { TrajectoryStore } from '@dressage/proxy/internal';
import { loadTokenizer, type TitoTokenizer } from '@dressage/tito';
import { defaultTokenizerDirectory } from '../src/start.js';

/** One rendered piece of a segment: its text, whether the model produced it, and its version. */
export interface Part {
  text: string;
  trainable?: boolean;
  version?: string;
}

/** A segment of a fixture trajectory and the per-token arrays it should show. */
export interface FixtureSegment {
  reason: SegmentReason;
  reasons: SegmentReason[];
  ids: number[];
  mask: number[];
  logprobs: number[];
  versions: string[];
  /** Token positions inside a `<tool_response>` span. */
  toolPositions: Set<number>;
  messages: ChatMessage[];
}

let tokenizer: Promise<TitoTokenizer> | null = null;

/** The real Qwen3 tokenizer, loaded once. */
export function qwenTokenizer(): Promise<TitoTokenizer> {
  tokenizer ??= loadTokenizer(defaultTokenizerDirectory());
  return tokenizer;
}

/** Encodes parts; model output gets distinct logprobs so a tooltip check can tell them apart. */
export function buildSegment(
  encoder: TitoTokenizer,
  parts: Part[],
  reason: SegmentReason,
  reasons: SegmentReason[] = [reason],
): FixtureSegment {
  const segment: FixtureSegment = {
    reason,
    reasons,
    ids: [],
    mask: [],
    logprobs: [],
    versions: [],
    toolPositions: new Set(),
    messages: [],
  };
  let insideTool = false;
  for (const part of parts) {
    for (const id of encoder.encode(part.text)) {
      const position = segment.ids.length;
      const text = encoder.decode([id]);
      if (text === '<tool_response>') insideTool = true;
      if (insideTool) segment.toolPositions.add(position);
      if (text === '</tool_response>') insideTool = false;
      segment.ids.push(id);
      segment.mask.push(part.trainable ? 1 : 0);
      segment.logprobs.push(part.trainable ? -Math.round((0.05 + (position % 17) * 0.125) * 1000) / 1000 : 0);
      segment.versions.push(part.trainable ? (part.version ?? '1') : '-1');
    }
  }
  return segment;
}

/** The two-segment agent session used across the tests (a tool call, its result, a history rewrite). */
export async function agentSession(): Promise<FixtureSegment[]> {
  const encoder = await qwenTokenizer();
  const first = buildSegment(
    encoder,
    [
      {
        text: '<|im_start|>system\nYou are a calculator agent.<|im_end|>\n<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n<|im_start|>assistant\n',
      },
      {
        text: '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12+30"}}\n</tool_call><|im_end|>',
        trainable: true,
        version: '3',
      },
      {
        text: '\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
      },
      { text: 'The answer is 42.<|im_end|>', trainable: true, version: '4' },
    ],
    'initial',
  );
  first.messages = [
    { role: 'system', content: 'You are a calculator agent.' },
    { role: 'user', content: 'What is 12 + 30?' },
    {
      role: 'assistant',
      content: '',
      tool_calls: [
        {
          id: 'call_1',
          type: 'function',
          function: { name: 'calculator', arguments: '{"expression":"12+30"}' },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '42' },
    { role: 'assistant', content: 'The answer is 42.' },
  ];
  const second = buildSegment(
    encoder,
    [
      {
        text: '<|im_start|>system\nYou are a calculator agent.<|im_end|>\n<|im_start|>user\nSummarise: 42.<|im_end|>\n<|im_start|>assistant\n',
      },
      { text: 'Forty-two.<|im_end|>', trainable: true, version: '4' },
    ],
    'history_rewrite',
    ['history_rewrite', 'message_prefix_mismatch'],
  );
  second.messages = [
    { role: 'system', content: 'You are a calculator agent.' },
    { role: 'user', content: 'Summarise: 42.' },
    { role: 'assistant', content: 'Forty-two.' },
  ];
  return [first, second];
}

function maskRanges(mask: number[]): Uint32Array {
  const ranges: number[] = [];
  for (let index = 0; index < mask.length; index++) {
    if (mask[index] === 1 && mask[index - 1] !== 1) ranges.push(index);
    if (mask[index] === 1 && mask[index + 1] !== 1) ranges.push(index + 1);
  }
  return Uint32Array.from(ranges);
}

function versionRuns(versions: string[]): Array<{ end: number; version: string }> {
  const runs: Array<{ end: number; version: string }> = [];
  versions.forEach((version, index) => {
    const last = runs.at(-1);
    if (last && last.version === version) last.end = index + 1;
    else runs.push({ end: index + 1, version });
  });
  return runs;
}

/** A lineage-view trajectory as the proxy stores it. */
export function storedTrajectory(
  id: string,
  instanceId: string,
  segments: FixtureSegment[],
  options: { finishReason?: string; reward?: number } = {},
): StoredTrajectory {
  return {
    trajectoryId: id,
    sessionId: id,
    instanceId,
    finalizedAt: Date.now(),
    recordVersions: true,
    records: segments.map((segment, index) => ({
      view: 'lineage',
      segmentIndex: index,
      block: index,
      end: segment.ids.length,
      responseStart: null,
      meta: {
        uid: `${id}-${index}`,
        session_id: id,
        trajectory_id: id,
        turn_id: null,
        instance_id: instanceId,
        segment_index: index,
        segment_count: segments.length,
        messages: segment.messages,
        tools: null,
        finish_reason: options.finishReason ?? 'stop',
        timestamp: 0,
        ...(options.reward === undefined ? {} : { reward: options.reward }),
        extra_info: {
          segment_view: 'lineage',
          segment_reason: segment.reason,
          segment_reasons: segment.reasons,
          alignment_method: 'tito',
          token_build_mode: 'tito',
          context_token_count: 0,
          context_delta_token_count: 0,
          output_token_count: 0,
          num_steps: 1,
          num_turns: 1,
          turn_ids: [],
          lineage_id: `${id}-lineage`,
          lineage_index: 0,
          branch_from_step_id: null,
          step_ids: [`${id}-step-${index}`],
          timestamp: '0',
          history_rewritten: false,
          trajectory_num_segments: segments.length,
          finalization_complete: true,
          finalization_id: `${id}-finalization`,
        },
      },
    })),
    blocks: segments.map((segment) => ({
      ids: Int32Array.from(segment.ids),
      logprobs: Float32Array.from(segment.logprobs),
      maskRanges: maskRanges(segment.mask),
      versionRuns: versionRuns(segment.versions),
    })),
  };
}

/**
 * Writes a store directory: `session-a` (two segments, reward 1), `session-b` (truncated, reward 0),
 * and `session-dropped`, put and then discarded (a tombstone in the log).
 */
export async function writeFixtureStore(directory = mkdtempSync(join(tmpdir(), 'inspector-store-'))) {
  const segments = await agentSession();
  const store = await TrajectoryStore.open({ directory });
  await store.put(storedTrajectory('session-a', 'instance-1', segments, { reward: 1 }));
  await store.put(
    storedTrajectory('session-b', 'instance-2', [segments[1]!], { finishReason: 'length', reward: 0 }),
  );
  await store.put(storedTrajectory('session-dropped', 'instance-3', [segments[1]!]));
  await store.discard('session-dropped');
  await store.close();
  return { directory, segments };
}
