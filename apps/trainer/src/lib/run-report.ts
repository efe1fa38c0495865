// The run's `report.html`, written from its metrics and error logs.
import { existsSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { readErrorLog } from './error-log.js';
import { type MetricsRecord, readMetricsLog } from './metrics-log.js';
import type { Recipe } from './recipe.js';
import { defaultReportPlots, renderReportHtml } from './report.js';
import { mean } from './run-figures.js';

/** Writes `report.html` from the run's metrics log; returns its path. */
export async function writeReport(outputDirectory: string, recipe: Pick<Recipe, 'name'>): Promise<string> {
  const records: MetricsRecord[] = existsSync(join(outputDirectory, 'metrics.jsonl'))
    ? await readMetricsLog(join(outputDirectory, 'metrics.jsonl'))
    : [];
  const rl = records.filter((record) => record.phase === 'rl');
  const rewards = rl
    .map((record) => record.metrics['rollout/raw_reward_trajectory_mean'])
    .filter(Number.isFinite);
  // Parity over on-policy tokens where measured; the trainer's all-token figure for older logs.
  const diffs = rl.map(
    (record) =>
      record.metrics['parity/logprob_abs_diff_max'] ??
      record.metrics['train/train_rollout_logprob_abs_diff_max'] ??
      0,
  );
  const offPolicy = rl
    .map((record) => record.metrics['offpolicy/logprob_abs_diff'])
    .filter((value): value is number => Number.isFinite(value));
  const gaps = rl
    .map((record) => record.metrics['version_gap/mean'])
    .filter((value): value is number => Number.isFinite(value));
  const idle = rl.at(-1)?.metrics['perf/trainer_idle_fraction'];
  const alarms = rl.filter((record) => record.metrics['alarm/raised'] === 1).map((record) => record.step + 1);
  const errors = await readErrorLog(join(outputDirectory, 'errors.jsonl'));
  const html = renderReportHtml(
    {
      name: recipe.name,
      generatedAt: new Date().toISOString(),
      facts: {
        'RL steps': rl.length,
        'warm-start steps': records.length - rl.length,
        'first reward': rewards.length > 0 ? Number((rewards[0] as number).toFixed(4)) : 'n/a',
        'last reward': rewards.length > 0 ? Number((rewards.at(-1) as number).toFixed(4)) : 'n/a',
        'max |trainer − rollout logprob|, on-policy tokens':
          diffs.length > 0 ? Math.max(...diffs).toExponential(2) : 'n/a',
        'mean version gap of trained tokens': gaps.length > 0 ? Number(mean(gaps).toFixed(3)) : 'n/a',
        'mean |trainer − rollout logprob|, older tokens':
          offPolicy.length > 0 ? mean(offPolicy).toExponential(2) : 'n/a',
        'trainer idle': idle === undefined ? 'n/a' : `${Math.round(idle * 100)}%`,
        'collapse alarms (steps)': alarms.length === 0 ? 'none' : alarms.join(', '),
        errors: errors.length === 0 ? 'none' : `${errors.length} (errors.jsonl)`,
      },
    },
    rl,
    defaultReportPlots,
    errors,
  );
  const path = join(outputDirectory, 'report.html');
  await writeFile(path, html);
  return path;
}
