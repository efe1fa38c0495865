// A proxy session: its steps and lineages, and the lock that orders its requests.
import { type Hash, randomBytes } from 'node:crypto';
import type { ChatMessage, RouteType, SegmentReason, Tool } from '@dressage/protocol';
import { isRealVersion } from '@dressage/protocol';
import { detailError } from './http-error.js';
import { TextArena } from './packed-text.js';
import type { BodyLayout } from './request-bytes.js';
import type { TokenBuffer, VersionRun } from './token-buffer.js';
import type { ToolCallHookResults } from './tool-call-hooks.js';

/** Prefix of synthetic turn ids in implicit turn mode. */
export const IMPLICIT_TURN_PREFIX = '__implicit_turn__:';

/** A lineage segment: one TITO training record's worth of steps, with its token buffer. */
export interface LineageSegment {
  buffer: TokenBuffer;
  steps: Step[];
  /** `initial` for the first segment of a lineage, else the lineage boundary reasons. */
  reasons: SegmentReason[];
  contextCount: number;
  outputCount: number;
  logprobsInvalid: boolean;
  incrementalFailed: boolean;
}

/** A chain of steps that extend one another (§1.7). */
export interface Lineage {
  id: string;
  index: number;
  branchFromStepId: string | null;
  steps: Step[];
  segments: LineageSegment[];
}

/** One recorded generation call (the proxy's in-memory StepRecord). */
export interface Step {
  stepId: string;
  index: number;
  turnId: string;
  lineage: Lineage;
  segment: LineageSegment;
  routeType: RouteType;
  routeBaseStepId: string | null;
  /**
   * The request's messages: the first `requestMessageCount` of `messageLog`, an array the steps of a
   * session share while each request starts with the previous one's messages (only appended to,
   * so each step's prefix stays as it was). See {@link snapshotMessages}.
   */
  messageLog: ChatMessage[];
  requestMessageCount: number;
  /** The recorded reply. */
  assistantMessage: ChatMessage;
  tools: Tool[] | null;
  toolsJson: string;
  /**
   * Rendered snapshot (no generation prompt): its length (-1 when it does not render) and its
   * {@link renderedDigest}. Routing only tests whether a snapshot starts a request's render, so the
   * text itself is not kept.
   */
  snapshotRenderedLength: number;
  snapshotDigest: string | null;
  /** Token storage: the step's prompt is `[0, promptEnd)`, its response `[promptEnd, responseEnd)`. */
  buffer: TokenBuffer;
  promptEnd: number;
  responseEnd: number;
  contextDeltaCount: number;
  lineageBoundaryBefore: boolean;
  lineageReasonsBefore: SegmentReason[];
  segmentBoundaryBefore: boolean;
  segmentReasonsBefore: SegmentReason[];
  finishReason: string;
  logprobsInvalid: boolean;
  incrementalFailed: boolean;
  requestVersion: string | null;
  responseVersion: string | null;
  /** Outputs and optional failures of the tool-call hooks dispatched for this step, or null. */
  toolCallHookMetadata: Record<string, unknown> | null;
  timestamp: number;
}

/** A step's messages: its request's, then its recorded reply (a new array). */
export function snapshotMessages(step: Step): ChatMessage[] {
  const messages = step.messageLog.slice(0, step.requestMessageCount);
  messages.push(step.assistantMessage);
  return messages;
}

/** What {@link Session.requestCache} keeps of the last request that passed validation. */
export interface RequestCache {
  /**
   * Its messages as JSON.parse gave them, for comparing a next body that comes parsed; null when
   * it came as bytes (the layout stands for them, and the validated messages alone hold the text).
   */
  rawMessages: readonly unknown[] | null;
  messages: ChatMessage[];
  rawTools: unknown;
  tools: Tool[] | null | undefined;
  /** Where its messages lie in its body, when it came as bytes (the next body is compared with it). */
  layout: BodyLayout | null;
}

/** A FIFO mutex: requests of one session, finalize and discard run one at a time. */
export class SessionLock {
  #tail: Promise<void> = Promise.resolve();
  #held = 0;

  /** True while some caller holds or waits for the lock. */
  get busy(): boolean {
    return this.#held > 0;
  }

  /** Runs `task` once every earlier task finished. */
  async run<T>(task: () => Promise<T>): Promise<T> {
    if (this.#held === 0) {
      // Uncontended (the usual case: one agent, one call at a time): nothing to wait for.
      this.#held = 1;
      let release!: () => void;
      this.#tail = new Promise<void>((resolve) => {
        release = resolve;
      });
      try {
        return await task();
      } finally {
        this.#held -= 1;
        release();
      }
    }
    this.#held += 1;
    const previous = this.#tail;
    let release!: () => void;
    this.#tail = new Promise<void>((resolve) => {
      release = resolve;
    });
    try {
      await previous;
      return await task();
    } finally {
      this.#held -= 1;
      release();
    }
  }
}

/** One agent session: its turn mode, steps, lineages and lock. */
export class Session {
  readonly id: string;
  instanceId: string;
  readonly lock = new SessionLock();
  turnMode: 'implicit' | 'explicit' | null = null;
  implicitTurnId: string | null = null;
  readonly turnIds: string[] = [];
  readonly steps: Step[] = [];
  readonly lineages: Lineage[] = [];
  historyRewritten = false;
  /** The rollout epoch this (non-partial) session is bound to, set by its first step. */
  boundEpoch: number | null = null;
  /** Distinct real versions of every response token so far, in order. */
  readonly realVersions: string[] = [];
  /**
   * Running hash of the latest step's rendered snapshot (null when it did not render): the next
   * request's render continues that snapshot, and its hash continues this one.
   */
  snapshotHash: Hash | null = null;
  /** The previous request's raw and validated messages and tools (validation reuses the prefix). */
  requestCache: RequestCache | null = null;
  /** The UTF-8 text of its history's long messages, packed once recorded (`packed-text.ts`). */
  readonly text = new TextArena();
  /** Finished tool-call hook dispatches by idempotency key (created on the first dispatch). */
  toolCallHookResults: ToolCallHookResults | null = null;
  lastActivity = Date.now();
  closed = false;

  constructor(id: string, instanceId: string) {
    this.id = id;
    this.instanceId = instanceId;
  }

  /**
   * Resolves the turn id of a request (§1.2).
   * @throws ProxyHttpError 400 on a turn-mode violation.
   */
  resolveTurn(explicit: string | null): string {
    if (explicit?.startsWith(IMPLICIT_TURN_PREFIX)) {
      throw detailError(400, `turn_id must not start with the reserved prefix ${IMPLICIT_TURN_PREFIX}`);
    }
    if (this.turnMode === null) {
      if (explicit === null) {
        this.turnMode = 'implicit';
        this.implicitTurnId = `${IMPLICIT_TURN_PREFIX}${randomBytes(16).toString('hex')}`;
        this.turnIds.push(this.implicitTurnId);
        return this.implicitTurnId;
      }
      this.turnMode = 'explicit';
      this.turnIds.push(explicit);
      return explicit;
    }
    if (this.turnMode === 'implicit') {
      if (explicit !== null) {
        throw detailError(
          400,
          `turn_id ${JSON.stringify(explicit)} was sent, but session ${this.id} started without turn ids (implicit turn mode)`,
        );
      }
      return this.implicitTurnId!;
    }
    if (explicit === null) {
      throw detailError(400, `turn_id is required: session ${this.id} started with explicit turn ids`);
    }
    const active = this.turnIds.at(-1);
    if (explicit === active) return explicit;
    if (this.turnIds.includes(explicit)) {
      throw detailError(
        400,
        `turn_id ${JSON.stringify(explicit)} is an earlier turn of session ${this.id}; the active turn is ${JSON.stringify(active)}`,
      );
    }
    this.turnIds.push(explicit);
    return explicit;
  }

  /** Distinct turn ids over the recorded steps. */
  get numTurns(): number {
    return new Set(this.steps.map((step) => step.turnId)).size;
  }

  /** Records the real versions of a response (staleness and version checks read them). */
  noteVersions(runs: readonly VersionRun[]): void {
    for (const run of runs)
      if (isRealVersion(run.version) && !this.realVersions.includes(run.version))
        this.realVersions.push(run.version);
  }
}
