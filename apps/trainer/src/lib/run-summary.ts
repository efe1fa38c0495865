import { join, relative } from 'node:path';
import { sparkline } from './progress.js';
import type { TrainingSummary } from './training-run.js';

/** How the user started the CLI, so the printed next command is one they can paste. */
export interface Invocation {
  /** `pnpm dressage` when run through the repository's scripts, `dressage` otherwise. */
  command: string;
  /** Paths are shown relative to this directory when under it. */
  cwd: string;
}

/** The invocation of this process: `pnpm dressage` inside a pnpm script, else `dressage`. */
export function currentInvocation(): Invocation {
  return {
    command: process.env.npm_lifecycle_event === undefined ? 'dressage' : 'pnpm dressage',
    cwd: process.cwd(),
  };
}

function shown(path: string, cwd: string): string {
  const relativePath = relative(cwd, path);
  return relativePath === '' || relativePath.startsWith('..') ? path : relativePath;
}

function fixed(value: number | null): string {
  return value === null ? 'n/a' : value.toFixed(3);
}

/**
 * What a finished run prints: the reward curve in a few characters, the figures that say whether it
 * learned, where the report is and the one command that opens the run.
 */
export function formatRunSummary(name: string, summary: TrainingSummary, invocation: Invocation): string {
  const { rewards } = summary;
  const lastTen = rewards.slice(-10);
  const lastTenMean =
    lastTen.length === 0 ? null : lastTen.reduce((sum, value) => sum + value, 0) / lastTen.length;
  const lines = [
    `${name}: ${summary.stepsCompleted} RL steps${summary.stopped ? ' (stopped)' : ''}`,
    `reward: ${sparkline(rewards)}  first ${fixed(summary.firstReward)}, last ten ${fixed(lastTenMean)}`,
    `max |trainer - rollout logprob| over on-policy tokens: ${summary.maxLogprobDiff.toExponential(2)}`,
  ];
  if (summary.meanVersionGap > 0)
    lines.push(
      `mean version gap of trained tokens: ${summary.meanVersionGap.toFixed(2)}; max |trainer - rollout logprob| over older tokens: ${summary.maxOffPolicyLogprobDiff.toExponential(2)}`,
    );
  const run = shown(summary.outputDirectory, invocation.cwd);
  lines.push(
    `weights: version ${summary.weightVersion}`,
    `metrics: ${shown(join(summary.outputDirectory, 'metrics.jsonl'), invocation.cwd)}`,
    `report:  ${shown(summary.reportPath, invocation.cwd)} (open it in a browser)`,
    `inspect every trajectory: ${invocation.command} inspect --run ${run}`,
  );
  if (summary.stopped) lines.push(`continue: ${invocation.command} train --recipe <recipe> --resume`);
  return lines.join('\n');
}
