/** The figures on the live progress line. */
export interface ProgressState {
  step: number;
  totalSteps: number;
  phase: 'warm_start' | 'rl';
  reward?: number;
  tokensPerSecond?: number;
  /** Mean version gap of the trained tokens: the trainer's version minus the one that generated them. */
  versionGap?: number;
  /** Shares of trained tokens 0, 1 and 2 or more versions behind. */
  gapShares?: readonly [number, number, number];
  trainerIdleFraction?: number;
  /** Mean |trainer − rollout logprob| over on-policy tokens (parity). */
  logprobDiff?: number;
  /** Mean |trainer − rollout logprob| over tokens of older weights (the off-policy gap). */
  offPolicyLogprobDiff?: number;
}

function percent(value: number): string {
  return `${Math.round(value * 100)}%`;
}

/**
 * Formats the live progress line, e.g.
 * `step 12/60 rl | reward 0.412 | 1830 tok/s | gap 0.6 (0:40% 1:58% 2+:2%) | idle 8% | |Δlogp| 2.1e-7 | off-policy 3.0e-2`.
 */
export function formatProgressLine(state: ProgressState): string {
  const parts = [`step ${state.step}/${state.totalSteps} ${state.phase === 'rl' ? 'rl' : 'warm-start'}`];
  if (state.reward !== undefined) parts.push(`reward ${state.reward.toFixed(3)}`);
  if (state.tokensPerSecond !== undefined) parts.push(`${Math.round(state.tokensPerSecond)} tok/s`);
  if (state.versionGap !== undefined) {
    const shares = state.gapShares;
    parts.push(
      shares === undefined || shares[0] === 1
        ? `gap ${state.versionGap.toFixed(1)}`
        : `gap ${state.versionGap.toFixed(1)} (0:${percent(shares[0])} 1:${percent(shares[1])} 2+:${percent(shares[2])})`,
    );
  }
  if (state.trainerIdleFraction !== undefined) parts.push(`idle ${percent(state.trainerIdleFraction)}`);
  if (state.logprobDiff !== undefined) parts.push(`|Δlogp| ${state.logprobDiff.toExponential(1)}`);
  if (state.offPolicyLogprobDiff !== undefined)
    parts.push(`off-policy ${state.offPolicyLogprobDiff.toExponential(1)}`);
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
