// The small arithmetic of a run's figures: means, elapsed seconds, metric name prefixes.

/** The mean of `values`; 0 for none. */
export function mean(values: readonly number[]): number {
  return values.length === 0 ? 0 : values.reduce((sum, value) => sum + value, 0) / values.length;
}

/** Seconds since `since`, a `performance.now()` reading. */
export function seconds(since: number): number {
  return (performance.now() - since) / 1000;
}

/** `metrics` with every name prefixed (`train/`, `warm_start/`). */
export function prefixed(prefix: string, metrics: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(metrics).map(([key, value]) => [`${prefix}${key}`, value]));
}
