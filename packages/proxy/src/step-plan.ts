// Planning one request of a session (where its prompt continues, what it renders, which segment it
// extends) and committing the step once the engine answered.
import { createHash, type Hash } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { ChatMessage, RouteType, SegmentReason, Tool } from '@dressage/protocol';
import { canonicalToolsJson, isMessagePrefix, rendersAlike } from '@dressage/tito/internal';
import type { RoutedExpertsDtype } from './config.js';
import type { RoutedExpertsPiece } from './generation-controller.js';
import { packMessage, type TextArena } from './packed-text.js';
import { PromptIds } from './prompt-ids.js';
import type { PromptTokenizer } from './prompt-tokenizer.js';
import { type Lineage, type LineageSegment, type Session, type Step, snapshotMessages } from './session.js';
import { TokenBuffer, type VersionRun } from './token-buffer.js';

/** Where a request goes and what its prompt is, computed before generation and committed after. */
export interface StepPlan {
  turnId: string;
  routeType: RouteType;
  baseStep: Step | null;
  /** Lineage to extend (append), or null for a new lineage. */
  lineage: Lineage | null;
  lineageBoundary: boolean;
  lineageReasons: SegmentReason[];
  segmentReasons: SegmentReason[];
  historyRewrite: boolean;
  /** The prompt's ids: its lineage segment's ids so far and `contextDelta`, or `contextDelta` alone. */
  promptIds: PromptIds;
  /** Ids this step adds before its output in its lineage segment (the whole prompt for a new segment). */
  contextDelta: Int32Array;
  incrementalFailed: boolean;
  messages: ChatMessage[];
  tools: Tool[] | null;
  toolsJson: string;
  /**
   * The previous step's rendered snapshot when this request extends it (same tools, the same
   * messages as sent): the request's render and the new step's snapshot continue it.
   */
  renderBase: RenderBase | null;
}

/**
 * A rendered snapshot that later renders continue: how many messages it covers, its length, and the
 * running hash of its text (never digested itself: copies are).
 */
export interface RenderBase {
  count: number;
  length: number;
  hash: Hash;
}

/**
 * A render: the whole text, or when `base` is set, the text that follows the base's snapshot
 * (the whole render is the base's text and then `text`).
 */
interface Render {
  base: RenderBase | null;
  text: string;
}

/** What generation produced for a step. */
export interface StepOutput {
  ids: Int32Array;
  logprobs: Float32Array;
  versionRuns: VersionRun[];
  logprobsInvalid: boolean;
  finishReason: string;
  assistantMessage: ChatMessage;
  requestVersion: string | null;
  /** R3 payloads of the generation's engine calls, in order. */
  routedExperts?: readonly RoutedExpertsPiece[];
  /** Tool-call hook outputs of the request. */
  toolCallHookMetadata?: Record<string, unknown> | null;
}

// SHA-256 over UTF-16 code units: hashing a text piece by piece gives the hash of the whole text,
// wherever the pieces split it.
function feedText(hash: Hash, text: string): Hash {
  return hash.update(text, 'utf16le');
}

/**
 * The digest a step keeps of its rendered snapshot: SHA-256 of the text's UTF-16 code units,
 * base64. Equal digests (and lengths) stand for equal texts.
 */
export function renderedDigest(text: string): string {
  return feedText(createHash('sha256'), text).digest('base64');
}

const lineageReasonSet = new Set<SegmentReason>([
  'tools_changed',
  'tito_routing_render_failed',
  'tito_incremental_tokenization_failed',
]);

const reasonOrder: SegmentReason[] = [
  'history_rewrite',
  'message_prefix_mismatch',
  'tools_changed',
  'tito_routing_render_failed',
  'tito_incremental_tokenization_failed',
];

/** Tokenization settings a plan needs. */
export interface PlanOptions {
  tokenizer: PromptTokenizer;
  mode: 'tito' | 'snapshot';
  /** Element type of stored routed experts (R3). Default int32. */
  routedExpertsDtype?: RoutedExpertsDtype;
}

// Canonical JSON of a tool list, by list: validation hands back the same list object while an agent's
// tools do not change, so large tool schemas are not re-serialized on every request.
const toolsJsonCache = new WeakMap<readonly Tool[], string>();

function toolsKey(tools: readonly Tool[] | null | undefined, noToolsEqualsEmpty: boolean): string {
  if (tools === null || tools === undefined) return 'null';
  if (tools.length === 0 && noToolsEqualsEmpty) return 'null';
  let json = toolsJsonCache.get(tools);
  if (json === undefined) {
    json = canonicalToolsJson(tools);
    toolsJsonCache.set(tools, json);
  }
  return json;
}

/**
 * Routes a request to a lineage and builds its prompt ids (§1.7–1.9). Pure: nothing in the session
 * changes until {@link commitStep}.
 */
export function planStep(
  session: Session,
  turnId: string,
  messages: ChatMessage[],
  tools: Tool[] | null,
  options: PlanOptions,
): StepPlan {
  const { tokenizer, mode } = options;
  const toolsJson = toolsKey(tools, tokenizer.noToolsEqualsEmptyTools);
  const previous = session.steps.at(-1) ?? null;
  const appendOnly = previous === null || isMessagePrefix(snapshotMessages(previous), messages);
  const historyRewrite = previous !== null && previous.turnId === turnId && !appendOnly;

  let routeType: RouteType = 'create';
  let baseStep: Step | null = null;
  let renderFailed = false;
  let rendered: Render | null = null;
  const renderBase = previous === null ? null : continuableRender(session, previous, messages, toolsJson);
  try {
    // Agents resend the whole history: continue the previous step's render when the renderer can,
    // rendering only the new messages (same text as a full render, checked in the renderer tests).
    rendered = renderContinuing(tokenizer, messages, tools, renderBase, true);
  } catch {
    renderFailed = true;
  }
  if (rendered !== null) {
    const candidate = bestPrefixCandidate(session, rendered);
    if (candidate) {
      baseStep = candidate;
      routeType = candidate.lineage.steps.at(-1) === candidate ? 'append' : 'branch';
    } else {
      // A tools change breaks the string prefix; the lineage still continues, split at a boundary.
      for (let index = session.steps.length - 1; index >= 0; index--) {
        const step = session.steps[index]!;
        if (
          step.lineage.steps.at(-1) === step &&
          step.toolsJson !== toolsJson &&
          isMessagePrefix(snapshotMessages(step), messages)
        ) {
          baseStep = step;
          routeType = 'append';
          break;
        }
      }
    }
  } else if (previous !== null && appendOnly) {
    baseStep = previous;
    routeType = 'append';
  }
  // A whole render is handed to a full encode; a continued one is not kept whole (the encoder then
  // renders again, which only a failed incremental encode of a continued request needs).
  const renderedText = rendered !== null && rendered.base === null ? rendered.text : undefined;

  const reasons = new Set<SegmentReason>();
  if (historyRewrite) reasons.add('history_rewrite');
  if (mode === 'tito' && previous !== null && routeType === 'create' && !historyRewrite) {
    reasons.add('message_prefix_mismatch');
  }
  if (baseStep !== null && baseStep.toolsJson !== toolsJson) reasons.add('tools_changed');
  if (renderFailed) reasons.add('tito_routing_render_failed');

  let promptIds: PromptIds;
  let contextDelta: Int32Array;
  let incrementalFailed = false;
  const lineageBoundaryPlanned =
    routeType === 'append' && [...reasons].some((reason) => lineageReasonSet.has(reason));
  if (mode === 'tito' && baseStep !== null && !lineageBoundaryPlanned) {
    const base = routeType === 'append' ? baseStep.segment.buffer : baseStep.buffer;
    const baseLength = routeType === 'append' ? base.length : baseStep.responseEnd;
    try {
      const delta = tokenizer.encodeIncremental(
        { length: baseLength, lastId: base.idAt(baseLength - 1) ?? -1 },
        snapshotMessages(baseStep),
        messages,
      );
      // Appended to its lineage, the prompt is the segment's ids so far (read where they are kept)
      // and the delta; a new lineage's segment starts with the whole prompt.
      promptIds = new PromptIds(base, baseLength, delta);
      contextDelta = delta;
      if (routeType !== 'append') {
        contextDelta = promptIds.toInt32Array();
        promptIds = PromptIds.of(contextDelta);
      }
    } catch {
      incrementalFailed = true;
      reasons.add('tito_incremental_tokenization_failed');
      contextDelta = tokenizer.encodeFull(messages, tools, renderedText);
      promptIds = PromptIds.of(contextDelta);
    }
  } else {
    contextDelta = tokenizer.encodeFull(messages, tools, renderedText);
    promptIds = PromptIds.of(contextDelta);
  }
  const segmentReasons = reasonOrder.filter((reason) => reasons.has(reason));
  const lineageReasons =
    routeType === 'append' ? segmentReasons.filter((reason) => lineageReasonSet.has(reason)) : [];
  return {
    turnId,
    routeType,
    baseStep,
    lineage: routeType === 'append' ? baseStep!.lineage : null,
    lineageBoundary: lineageReasons.length > 0,
    lineageReasons,
    segmentReasons: previous === null ? [] : segmentReasons,
    historyRewrite,
    promptIds,
    contextDelta,
    incrementalFailed,
    messages,
    tools,
    toolsJson,
    renderBase: rendered === null ? null : renderBase,
  };
}

// The previous step's rendered snapshot when `messages` starts with its messages exactly as sent and
// the tools are the same, so that its text is the start of the request's render; else null.
function continuableRender(
  session: Session,
  previous: Step,
  messages: readonly ChatMessage[],
  toolsJson: string,
): RenderBase | null {
  const hash = session.snapshotHash;
  const length = previous.snapshotRenderedLength;
  const snapshot = snapshotMessages(previous);
  if (hash === null || length < 0 || previous.toolsJson !== toolsJson) return null;
  if (snapshot.length === 0 || snapshot.length > messages.length) return null;
  // Nearly always the same objects (the request cache reuses the previous request's messages); the
  // assistant reply comes back as the agent's copy of it.
  for (let index = 0; index < snapshot.length; index++)
    if (!rendersAlike(snapshot[index]!, messages[index]!)) return null;
  return { count: snapshot.length, length, hash };
}

// True when `left` comes before `right` in the candidate order of §1.7: longest rendered snapshot,
// then latest of its lineage, then most recent, then lineage index.
function ranksBefore(left: Step, right: Step): boolean {
  if (left.snapshotRenderedLength !== right.snapshotRenderedLength)
    return left.snapshotRenderedLength > right.snapshotRenderedLength;
  const leftLatest = left.lineage.steps.at(-1) === left;
  const rightLatest = right.lineage.steps.at(-1) === right;
  if (leftLatest !== rightLatest) return leftLatest;
  if (left.index !== right.index) return left.index > right.index;
  return left.lineage.index < right.lineage.index;
}

// The first candidate in §1.7 order whose snapshot prefixes the request, i.e. the best-ranked valid
// one. A continued render starts with the previous step's snapshot by construction, and that step
// ranks first among snapshots no longer than its own (it is the latest step): only longer snapshots
// are tested then, usually none. Snapshots are tested by digest: the request's render is hashed once,
// with a digest copied at each length some snapshot has.
function bestPrefixCandidate(session: Session, rendered: Render): Step | null {
  const base = rendered.base;
  const offset = base === null ? 0 : base.length;
  const end = offset + rendered.text.length;
  const best = base === null ? null : session.steps.at(-1)!;
  const lengths: number[] = [];
  for (const step of session.steps) {
    const length = step.snapshotRenderedLength;
    if (step.snapshotDigest !== null && length > offset && length <= end) lengths.push(length);
  }
  if (base === null) {
    // An empty snapshot starts every render (it cannot come from a template, but costs nothing).
    for (const step of session.steps) if (step.snapshotRenderedLength === 0) lengths.push(0);
  }
  if (lengths.length === 0) return best;
  const digests = prefixDigests(
    rendered.text,
    base === null ? createHash('sha256') : base.hash.copy(),
    offset,
    lengths,
  );
  let found = best;
  for (let index = session.steps.length - 1; index >= 0; index--) {
    const step = session.steps[index]!;
    if (found !== null && !ranksBefore(step, found)) continue;
    const digest = digests.get(step.snapshotRenderedLength);
    if (digest !== undefined && digest === step.snapshotDigest) found = step;
  }
  return found;
}

// Digests of the render's first `length` characters for each length (all within
// `[offset, offset + text.length]`), `hash` having been fed the render's first `offset` characters.
function prefixDigests(text: string, hash: Hash, offset: number, lengths: number[]): Map<number, string> {
  const digests = new Map<number, string>();
  const sorted = [...new Set(lengths)].sort((left, right) => left - right);
  let position = offset;
  for (const length of sorted) {
    feedText(hash, text.slice(position - offset, length - offset));
    position = length;
    digests.set(length, hash.copy().digest('base64'));
  }
  return digests;
}

// The previous step's message log, extended, when the request starts with that step's request
// messages as the same objects (the request cache hands the repeated ones back); else a new log.
// Sharing keeps one reference per message for a chain of steps instead of one per message per step.
// Messages entering the log are packed ({@link packMessage}), in `messages` too: that array is the
// request cache's, whose objects the next request repeats (and the log is shared by identity).
function messageLogFor(previous: Step | null, messages: ChatMessage[], arena: TextArena): ChatMessage[] {
  let log: ChatMessage[] | null = null;
  if (previous !== null) {
    const count = previous.requestMessageCount;
    let shared = previous.messageLog.length === count && messages.length >= count;
    for (let index = 0; shared && index < count; index++)
      shared = previous.messageLog[index] === messages[index];
    if (shared) log = previous.messageLog;
  }
  const from = log === null ? 0 : previous!.requestMessageCount;
  // The first new message is usually the agent's copy of the previous reply: its text is stored once.
  const reply = log === null ? undefined : previous!.assistantMessage;
  for (let index = from; index < messages.length; index++)
    messages[index] = packMessage(messages[index]!, arena, index === from ? reply : undefined);
  if (log === null) return messages.slice();
  // When that copy equals the reply, it stands for it: one object, and the reply's parse (strings
  // sliced from the engine's text, which they would keep alive) is dropped.
  if (messages.length > from && isDeepStrictEqual(messages[from], reply))
    previous!.assistantMessage = messages[from]!;
  for (let index = from; index < messages.length; index++) log.push(messages[index]!);
  return log;
}

function newSegment(reasons: SegmentReason[]): LineageSegment {
  return {
    buffer: new TokenBuffer(),
    steps: [],
    reasons,
    contextCount: 0,
    outputCount: 0,
    logprobsInvalid: false,
    incrementalFailed: false,
  };
}

/** Records a generated step: attaches it to its lineage segment and appends its tokens. */
export function commitStep(session: Session, plan: StepPlan, output: StepOutput, options: PlanOptions): Step {
  let lineage = plan.lineage;
  if (lineage === null) {
    lineage = {
      id: `lineage-${String(session.lineages.length + 1).padStart(6, '0')}`,
      index: session.lineages.length,
      branchFromStepId: plan.routeType === 'branch' ? plan.baseStep!.stepId : null,
      steps: [],
      segments: [newSegment(['initial'])],
    };
    session.lineages.push(lineage);
  } else if (plan.lineageBoundary) {
    lineage.segments.push(newSegment(plan.lineageReasons));
  }
  const segment = lineage.segments.at(-1)!;
  let buffer = segment.buffer;
  if (options.mode === 'snapshot') {
    // Snapshot steps own their full prompt; the lineage buffer is not used for records.
    buffer = new TokenBuffer(plan.promptIds.length + output.ids.length);
  }
  // A snapshot step's prompt is whole (encoded in full): `contextDelta` is all of it.
  buffer.appendContext(plan.contextDelta);
  const promptEnd = buffer.length;
  buffer.appendResponse(output.ids, output.logprobs, output.versionRuns);
  const responseEnd = buffer.length;
  // Engine calls see the step's prompt (plus earlier chunks' output) from position 0 of this buffer.
  for (const piece of output.routedExperts ?? [])
    buffer.addRouting(piece.data, piece.start, piece.sequenceLength, options.routedExpertsDtype ?? 'int32');
  segment.contextCount += plan.contextDelta.length;
  segment.outputCount += output.ids.length;
  segment.logprobsInvalid ||= output.logprobsInvalid;
  segment.incrementalFailed ||= plan.incrementalFailed;
  const snapshot = [...plan.messages, output.assistantMessage];
  const rendered = renderSnapshot(options.tokenizer, snapshot, plan.tools, plan.renderBase);
  let snapshotRenderedLength = -1;
  let snapshotDigest: string | null = null;
  session.snapshotHash = null;
  if (rendered !== null) {
    const hash = feedText(
      rendered.base === null ? createHash('sha256') : rendered.base.hash.copy(),
      rendered.text,
    );
    snapshotRenderedLength = (rendered.base?.length ?? 0) + rendered.text.length;
    snapshotDigest = hash.copy().digest('base64');
    session.snapshotHash = hash;
  }
  const index = session.steps.length;
  const lastVersion = output.versionRuns.at(-1)?.version ?? null;
  const step: Step = {
    stepId: `step-${String(index + 1).padStart(6, '0')}`,
    index,
    turnId: plan.turnId,
    lineage,
    segment,
    routeType: plan.routeType,
    routeBaseStepId: plan.baseStep?.stepId ?? null,
    messageLog: messageLogFor(session.steps.at(-1) ?? null, plan.messages, session.text),
    requestMessageCount: plan.messages.length,
    assistantMessage: packMessage(output.assistantMessage, session.text),
    tools: plan.tools,
    toolsJson: plan.toolsJson,
    snapshotRenderedLength,
    snapshotDigest,
    buffer,
    promptEnd,
    responseEnd,
    contextDeltaCount: plan.contextDelta.length,
    lineageBoundaryBefore: plan.lineageBoundary,
    lineageReasonsBefore: plan.lineageReasons,
    segmentBoundaryBefore: plan.segmentReasons.length > 0,
    segmentReasonsBefore: plan.segmentReasons,
    finishReason: output.finishReason,
    logprobsInvalid: output.logprobsInvalid,
    incrementalFailed: plan.incrementalFailed,
    requestVersion: output.requestVersion,
    responseVersion: lastVersion,
    toolCallHookMetadata: output.toolCallHookMetadata ?? null,
    timestamp: Date.now() / 1000,
  };
  if (plan.historyRewrite) session.historyRewritten = true;
  lineage.steps.push(step);
  segment.steps.push(step);
  session.steps.push(step);
  session.noteVersions(output.versionRuns);
  return step;
}

// `render(messages, tools, addGenerationPrompt)`, as what follows `base`'s snapshot when the
// renderer can continue it, else rendered whole.
function renderContinuing(
  tokenizer: PromptTokenizer,
  messages: ChatMessage[],
  tools: Tool[] | null,
  base: RenderBase | null,
  addGenerationPrompt: boolean,
): Render {
  const continuation =
    base === null ? null : tokenizer.renderFrom(messages, base.count, tools, addGenerationPrompt);
  return continuation === null
    ? { base: null, text: tokenizer.render(messages, tools, addGenerationPrompt) }
    : { base, text: continuation };
}

// The snapshot's render (no generation prompt), continuing the plan's base when it has one; null
// when the messages do not render.
function renderSnapshot(
  tokenizer: PromptTokenizer,
  messages: ChatMessage[],
  tools: Tool[] | null,
  base: RenderBase | null,
): Render | null {
  try {
    return renderContinuing(tokenizer, messages, tools, base, false);
  } catch {
    return null;
  }
}
