/** The figures on the live progress line. */
export interface ProgressState {
  step: number;
  totalSteps: number;
  phase: 'warm_start' | 'rl';
  reward?: number;
  tokensPerSecond?: number;
  /** Mean weight versions behind the trained policy. */
  staleness?: number;
  trainerIdleFraction?: number;
  logprobDiff?: number;
}

/** Formats the live progress line, e.g. `step 12/60 rl | reward 0.412 | 1830 tok/s | stale 0.0 | idle 8%`. */
export function formatProgressLine(state: ProgressState): string {
  const parts = [`step ${state.step}/${state.totalSteps} ${state.phase === 'rl' ? 'rl' : 'warm-start'}`];
  if (state.reward !== undefined) parts.push(`reward ${state.reward.toFixed(3)}`);
  if (state.tokensPerSecond !== undefined) parts.push(`${Math.round(state.tokensPerSecond)} tok/s`);
  if (state.staleness !== undefined) parts.push(`stale ${state.staleness.toFixed(1)}`);
  if (state.trainerIdleFraction !== undefined)
    parts.push(`idle ${Math.round(state.trainerIdleFraction * 100)}%`);
  if (state.logprobDiff !== undefined) parts.push(`|Δlogp| ${state.logprobDiff.toExponential(1)}`);
  return parts.join(' | ');
}

/**
 * Writes the progress line: rewritten in place on a terminal, one line per update otherwise (logs
 * and CI keep every step).
 */
export class ProgressLine {
  constructor(private readonly stream: NodeJS.WriteStream = process.stdout) {}

  update(state: ProgressState): void {
    const line = formatProgressLine(state);
    if (this.stream.isTTY) this.stream.write(`\r\u001b[2K${line}`);
    else this.stream.write(`${line}\n`);
  }

  /** Ends an in-place line so later output starts on a fresh line. */
  finish(): void {
    if (this.stream.isTTY) this.stream.write('\n');
  }
}
