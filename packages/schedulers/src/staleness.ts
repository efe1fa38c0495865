import { findTrajectoryAnchors } from '@dressage/multi-segment';
import { DressageError, isRealVersion, type Sample } from '@dressage/protocol';

/** A trajectory's id and the weight version of its last trained token. */
export interface TrajectoryVersion {
  parentTrajId: string;
  version: string;
}

/**
 * The anchor of each trajectory: its live segment with the highest `segment_index`, the later one in
 * input order on a tie — multi-segment's one anchor rule, keyed by trajectory id.
 */
export function trajectoryAnchors(samples: readonly Sample[]): Map<string, Sample> {
  const anchors = new Map<string, Sample>();
  for (const [id, position] of findTrajectoryAnchors(samples)) anchors.set(id, samples[position] as Sample);
  return anchors;
}

/**
 * Version of each trajectory in `samples`: the anchor's `metadata.dressage_end_token_version`.
 * Trajectories without a parent id or without a real version are left out (they neither advance
 * the tracker nor get dropped).
 */
export function trajectoryVersions(samples: readonly Sample[]): TrajectoryVersion[] {
  const out: TrajectoryVersion[] = [];
  for (const [parentTrajId, anchor] of trajectoryAnchors(samples)) {
    const version = anchor.metadata.dressage_end_token_version;
    if (typeof version === 'string' && isRealVersion(version)) out.push({ parentTrajId, version });
  }
  return out;
}

/**
 * Batch-level staleness control: keeps the weight versions it has seen in observation order (labels
 * are opaque) and drops a whole group when any of its trajectories ended on a version older than the
 * newest `keepVersions`. The caller can tell it the version the trainer holds
 * ({@link StalenessTracker.observeVersion}), so that groups are judged against the weights they
 * will be trained with, not only against the newest version a rollout happened to end on.
 * `keepVersions` 0 or null turns it off: no version is tracked, nothing is dropped and no
 * `staleness/*` metric is reported.
 */
export class StalenessTracker {
  readonly #order: string[] = [];
  readonly #positions = new Map<string, number>();
  droppedGroups = 0;

  constructor(readonly keepVersions: number | null) {
    if (keepVersions !== null && (!Number.isInteger(keepVersions) || keepVersions < 0)) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `dressage_staleness_keep_versions must be a non-negative integer or null, got ${keepVersions}`,
      });
    }
  }

  /** True when groups can be dropped. */
  get enabled(): boolean {
    return this.keepVersions !== null && this.keepVersions > 0;
  }

  /** Versions seen so far, oldest first. */
  get versions(): readonly string[] {
    return this.#order;
  }

  /** Index of the newest version seen; -1 before any. */
  get currentIndex(): number {
    return this.#order.length - 1;
  }

  /** Trajectories on versions with a lower index are stale. */
  get cutoffIndex(): number {
    if (!this.enabled) return 0;
    return Math.max(0, this.#order.length - (this.keepVersions as number));
  }

  /**
   * Records the versions of a completed group. Returns true when a new version appeared. With the
   * control off nothing is recorded (as the reference's tracker).
   */
  observe(samples: readonly Sample[]): boolean {
    if (!this.enabled) return false;
    let advanced = false;
    for (const { version } of trajectoryVersions(samples))
      advanced = this.observeVersion(version) || advanced;
    return advanced;
  }

  /**
   * Records one version, e.g. the one the trainer holds now (a weight update makes every version
   * before it one step older even before any rollout ends on it). Returns true when it is new.
   * With the control off nothing is recorded.
   */
  observeVersion(version: string): boolean {
    if (!this.enabled || !isRealVersion(version) || this.#positions.has(version)) return false;
    this.#positions.set(version, this.#order.length);
    this.#order.push(version);
    return true;
  }

  /**
   * True when the group must be dropped. With `versionsAhead` k, true when it would have to be
   * dropped once k more versions have appeared (a group that cannot be trained before then).
   */
  isStale(samples: readonly Sample[], versionsAhead = 0): boolean {
    if (!this.enabled) return false;
    const cutoff = Math.max(0, this.#order.length + versionsAhead - (this.keepVersions as number));
    return trajectoryVersions(samples).some(
      ({ version }) => (this.#positions.get(version) ?? cutoff) < cutoff,
    );
  }

  /** Versions behind the newest, one per versioned trajectory. */
  gaps(samples: readonly Sample[]): number[] {
    const current = this.currentIndex;
    return trajectoryVersions(samples)
      .map(({ version }) => this.#positions.get(version))
      .filter((index): index is number => index !== undefined)
      .map((index) => current - index);
  }

  /**
   * `staleness/*` metrics of a returned batch: dropped groups so far in this call (pass it in),
   * current and cutoff version index, and the trajectory-weighted version gap. None when staleness
   * control is off (as the reference).
   */
  metrics(groups: readonly (readonly Sample[])[], droppedGroups: number): Record<string, number> {
    if (!this.enabled) return {};
    const metrics: Record<string, number> = {
      'staleness/dropped_groups': droppedGroups,
      'staleness/current_version_index': this.currentIndex,
      'staleness/cutoff_version_index': this.cutoffIndex,
    };
    const gaps = groups.flatMap((group) => this.gaps(group));
    if (gaps.length > 0) {
      metrics['staleness/version_gap_min'] = Math.min(...gaps);
      metrics['staleness/version_gap_max'] = Math.max(...gaps);
      metrics['staleness/version_gap_mean'] = gaps.reduce((sum, gap) => sum + gap, 0) / gaps.length;
    }
    return metrics;
  }
}
