// The retry bookkeeping of a failed prompt group: its count, the next try's sample, the placeholder
// when retries are exhausted, and the proxy sessions the failed try touched.
import { markAbortedNoGrad } from '@dressage/multi-segment';
import type { Sample } from '@dressage/protocol';
import type { MarkAbortedNoGrad } from './generate.js';
import type { GroupOutcome } from './group-runner.js';

function nonEmpty(value: unknown): string | null {
  return typeof value === 'string' && value !== '' ? value : null;
}

/** The retry count of a group: its first sample's `metadata.dressage_retry_count` (0 when unset). */
export function retryCountOf(group: readonly Sample[]): number {
  const count = group[0]?.metadata.dressage_retry_count;
  return typeof count === 'number' && Number.isFinite(count) ? count : 0;
}

/**
 * Prepares a sample for another try: the failed attempt's session moves to
 * `metadata.last_retry_session_id`; `session_id`, `parent_traj_id` and `segment_index` are removed;
 * `dressage_retry_count` goes up by one and `remove_sample` is cleared. Returns a new sample.
 */
export function incrementRetry(sample: Sample): Sample {
  const metadata = structuredClone(sample.metadata);
  const session = nonEmpty(metadata.session_id) ?? nonEmpty(sample.session_id);
  if (session !== null) metadata.last_retry_session_id = session;
  delete metadata.session_id;
  delete metadata.parent_traj_id;
  delete metadata.segment_index;
  const count = typeof metadata.dressage_retry_count === 'number' ? metadata.dressage_retry_count : 0;
  metadata.dressage_retry_count = count + 1;
  return { ...sample, metadata, session_id: null, remove_sample: false };
}

/**
 * The default placeholder for a sample whose retries are exhausted (the multi-segment package's
 * `markAbortedNoGrad` is the full version and can be injected instead): excluded from training,
 * status `failed`, reward 0, no response; ids fall back to the sample's own session and instance
 * before a hash of the sample. Returns a new sample.
 */
export const defaultMarkAbortedNoGrad: MarkAbortedNoGrad = (sample, options) =>
  markAbortedNoGrad(sample, options);

/** The proxy sessions a failed group touched: sessions of the submitted and returned samples. */
export function sessionIdsOf(outcome: Pick<GroupOutcome, 'group' | 'samples'>): string[] {
  const ids = new Set<string>();
  for (const sample of [...outcome.group, ...outcome.samples]) {
    const fromMetadata = nonEmpty(sample.metadata.session_id);
    if (fromMetadata !== null) ids.add(fromMetadata);
    const own = nonEmpty(sample.session_id);
    if (own !== null) ids.add(own);
  }
  return [...ids];
}
