import { type PromptRecord, type Sample, SampleStatus } from '@dressage/protocol';
import type { GenerateContext, GenerateFunction, SessionDiscarder } from '../generate.js';

/** What a scripted generate call does for one sample. */
export interface Behavior {
  /** Milliseconds before answering (real timers, tiny). */
  delay?: number;
  /** `throw`: reject; `aborted`: return an aborted sample; `empty`: return nothing. */
  fail?: 'throw' | 'aborted' | 'empty';
  /** Weight version of the trajectory's last trained token. */
  version?: string;
  /** Segments per trajectory (multi-segment fan-out). */
  segments?: number;
  /** No loss mask / response: nothing trainable. */
  untrainable?: boolean;
  /** Error message when failing with `throw`. */
  message?: string;
  /** Waits for this promise (after the delay) before answering: ordering without timing. */
  gate?: Promise<void>;
}

/** A promise the test resolves when it wants. */
export function createGate(): { promise: Promise<void>; open: () => void } {
  let open = () => {};
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** Polls `condition` on real timers until it holds (fails after `timeoutMs`). */
export async function until(condition: () => boolean, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not reached in time');
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

function waitFor(gate: Promise<void>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    gate.then(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    });
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** A completed sample of trajectory `session`: 2 trainable response tokens. */
export function completedSample(sample: Sample, session: string, extra: Partial<Sample> = {}): Sample {
  return {
    ...sample,
    session_id: session,
    tokens: [1, 2, 3, 4],
    response: 'ok',
    response_length: 2,
    loss_mask: [1, 1],
    rollout_log_probs: [-0.1, -0.2],
    status: SampleStatus.COMPLETED,
    metadata: { ...sample.metadata, session_id: session, parent_traj_id: session },
    ...extra,
  };
}

/** Calls made to a scripted generate function. */
export interface GenerateCall {
  index: number | null;
  group: number | null;
  attempt: number;
  rolloutId: number;
}

/**
 * A deterministic generate function: `script` says per call how long to wait and whether to fail.
 * Every call gets a fresh session id `s<index>-<attempt>`.
 */
export function scriptedGenerate(
  script: (sample: Sample, context: GenerateContext) => Behavior = () => ({}),
): {
  generate: GenerateFunction;
  calls: GenerateCall[];
  cancelled: number[];
  running: () => number;
} {
  const calls: GenerateCall[] = [];
  const cancelled: number[] = [];
  let running = 0;
  const generate: GenerateFunction = async (sample, _params, context) => {
    calls.push({
      index: sample.index,
      group: sample.group_index,
      attempt: context.attempt,
      rolloutId: context.rolloutId,
    });
    const behavior = script(sample, context);
    const session = `s${sample.index}-${context.attempt}`;
    // Like a real agent, the sample learns its session as soon as the rollout starts.
    sample.session_id = session;
    running++;
    try {
      if (behavior.delay !== undefined && behavior.delay > 0) await sleep(behavior.delay, context.signal);
      else await Promise.resolve();
      if (behavior.gate !== undefined) await waitFor(behavior.gate, context.signal);
    } catch (error) {
      cancelled.push(sample.index ?? -1);
      throw error;
    } finally {
      running--;
    }
    if (behavior.fail === 'throw')
      throw new Error(behavior.message ?? `rollout of sample ${sample.index} failed`);
    if (behavior.fail === 'empty') return [];
    const versionMetadata =
      behavior.version === undefined
        ? {}
        : { dressage_end_token_version: behavior.version, full_versions: [behavior.version] };
    if (behavior.fail === 'aborted') {
      const aborted = completedSample(sample, session);
      return {
        ...aborted,
        metadata: { ...aborted.metadata, ...versionMetadata },
        status: SampleStatus.ABORTED,
      };
    }
    const extra: Partial<Sample> = behavior.untrainable
      ? { response_length: 0, loss_mask: [], rollout_log_probs: [] }
      : {};
    const base = completedSample(sample, session, extra);
    const segments = behavior.segments ?? 1;
    return Array.from({ length: segments }, (_, segmentIndex) => ({
      ...base,
      metadata: { ...base.metadata, ...versionMetadata, segment_index: segmentIndex },
    }));
  };
  return { generate, calls, cancelled, running: () => running };
}

/** Records discarded sessions. */
export function recordingDiscarder(): SessionDiscarder & { discarded: string[] } {
  const discarded: string[] = [];
  return {
    discarded,
    async discardSession(sessionId) {
      discarded.push(sessionId);
    },
  };
}

/** Prompt records `p0..p{count-1}`. */
export function promptRecords(count: number): PromptRecord[] {
  return Array.from({ length: count }, (_, i) => ({
    prompt: `p${i}`,
    label: `l${i}`,
    metadata: { instance_id: `i${i}` },
  }));
}

/** Collects warnings. */
export function recordingLogger(): { warn: (message: string) => void; warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, warn: (message) => warnings.push(message) };
}
