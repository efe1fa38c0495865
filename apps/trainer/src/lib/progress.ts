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
  /** Why this step looks like the start of a collapse (see `collapse-alarm.ts`); absent when it does not. */
  alarm?: string;
}

function percent(value: number): string {
  return `${Math.round(value * 100)}%`;
}

/**
 * Formats the figures of one step, e.g.
 * `step 12/60 rl | reward 0.412 | 1830 tok/s | gap 0.6 (0:40% 1:58% 2+:2%) | idle 8% | |Δlogp| 2.1e-7 | off-policy 3.0e-2`.
 */
export function formatProgressLine(state: ProgressState): string {
  const parts = [`step ${state.step}/${state.totalSteps} ${state.phase === 'rl' ? 'rl' : 'warm-start'}`];
  parts.push(...stepFigures(state));
  return parts.join(' | ');
}

// The figures after the step counter, shared by the plain and the live line.
function stepFigures(state: ProgressState): string[] {
  const parts: string[] = [];
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
  if (state.alarm !== undefined) parts.push(`ALARM ${state.alarm}`);
  return parts;
}

/** `m:ss` (or `h:mm:ss`) of a duration in seconds. */
export function formatDuration(seconds: number): string {
  const total = Math.max(0, Math.round(seconds));
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const rest = String(total % 60).padStart(2, '0');
  return hours > 0 ? `${hours}:${String(minutes).padStart(2, '0')}:${rest}` : `${minutes}:${rest}`;
}

/** A bar of `width` cells, `fraction` of them full. */
export function formatBar(fraction: number, width = 20): string {
  const full = Math.round(Math.min(1, Math.max(0, fraction)) * width);
  return `[${'#'.repeat(full)}${'.'.repeat(width - full)}]`;
}

const sparks = '▁▂▃▄▅▆▇█';

/**
 * The values as a curve in at most `width` characters (each the mean of its share of the values),
 * scaled from `low` to `high`: rewards from 0 to 1 read the same in every run.
 */
export function sparkline(values: readonly number[], width = 25, low = 0, high = 1): string {
  if (values.length === 0) return '';
  const cells = Math.min(width, values.length);
  let line = '';
  for (let cell = 0; cell < cells; cell++) {
    const from = Math.floor((cell * values.length) / cells);
    const to = Math.floor(((cell + 1) * values.length) / cells);
    let sum = 0;
    for (let index = from; index < to; index++) sum += values[index] as number;
    const value = sum / (to - from);
    const level = Math.round(((Math.min(high, Math.max(low, value)) - low) / (high - low || 1)) * 7);
    line += sparks[level];
  }
  return line;
}

/** Options of {@link Progress}. */
export interface ProgressOptions {
  /** Where lines go. Default stdout. */
  stream?: Pick<NodeJS.WriteStream, 'write'> & { isTTY?: boolean };
  /** Rewrite one line in place (a terminal). Default: the stream is a TTY. */
  live?: boolean;
  /** Without a terminal, at most one line per this many seconds (the last step always prints). Default 5. */
  intervalSeconds?: number;
  /** The clock, in milliseconds (tests). Default `performance.now`. */
  now?: () => number;
}

const phaseNames = { warm_start: 'warm-start', rl: 'RL' } as const;

/**
 * Progress a person can read. On a terminal, one live line per phase (a bar, the step, the rate,
 * the time left, the step's figures) rewritten in place, kept when the phase ends. On a pipe or in
 * CI, one line every few seconds and the last step. Each phase ends with a summary line.
 */
export class Progress {
  readonly #stream: NonNullable<ProgressOptions['stream']>;
  readonly #live: boolean;
  readonly #intervalMs: number;
  readonly #now: () => number;
  #phase: ProgressState['phase'] | null = null;
  #phaseStarted = 0;
  #firstStep = 0;
  #lastPrinted = Number.NEGATIVE_INFINITY;
  #open = false;

  constructor(options: ProgressOptions = {}) {
    this.#stream = options.stream ?? process.stdout;
    this.#live = options.live ?? this.#stream.isTTY === true;
    this.#intervalMs = (options.intervalSeconds ?? 5) * 1000;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * Starts a phase's clock before its first step; `fromStep` is the steps already done (a resumed
   * run), so the rate counts only this run's steps.
   */
  begin(phase: ProgressState['phase'], fromStep = 0): void {
    this.#closeLine();
    this.#phase = phase;
    this.#phaseStarted = this.#now();
    this.#firstStep = fromStep;
    this.#lastPrinted = Number.NEGATIVE_INFINITY;
  }

  /** Shows one step (of the phase begun; an update of another phase begins it). */
  update(state: ProgressState): void {
    if (this.#phase !== state.phase) this.begin(state.phase, state.step - 1);
    const now = this.#now();
    const done = state.step - this.#firstStep;
    const elapsed = (now - this.#phaseStarted) / 1000;
    const perStep = done > 0 ? elapsed / done : 0;
    const left = perStep * Math.max(0, state.totalSteps - state.step);
    const rate =
      perStep === 0
        ? ''
        : perStep < 1
          ? `${(1 / perStep).toFixed(1)} steps/s`
          : `${perStep.toFixed(1)} s/step`;
    const head = [
      `${phaseNames[state.phase]} ${formatBar(state.step / state.totalSteps)} ${state.step}/${state.totalSteps}`,
      rate,
      `${formatDuration(left)} left`,
    ].filter((part) => part !== '');
    const line = [head.join('  '), ...stepFigures(state)].join(' | ');
    if (this.#live) {
      this.#stream.write(`\r\u001b[2K${line}`);
      this.#open = true;
      return;
    }
    const last = state.step >= state.totalSteps;
    if (last || now - this.#lastPrinted >= this.#intervalMs || state.alarm !== undefined) {
      this.#stream.write(`${line}\n`);
      this.#lastPrinted = now;
    }
  }

  /** Ends the current phase: keeps its line and prints `summary` (if any) below it. */
  endPhase(summary?: string): void {
    this.#closeLine();
    if (summary !== undefined) this.#stream.write(`${summary}\n`);
    this.#phase = null;
  }

  /** Seconds since the current phase's first update (0 when none is running). */
  get phaseSeconds(): number {
    return this.#phase === null ? 0 : (this.#now() - this.#phaseStarted) / 1000;
  }

  #closeLine(): void {
    if (this.#open) this.#stream.write('\n');
    this.#open = false;
  }
}
