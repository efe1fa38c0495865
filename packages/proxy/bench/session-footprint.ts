// Bytes a proxy session holds, counted structure by structure: what dominates a session's memory
// (token data, rendered snapshots, the kept request body, message arrays, ...). Sizes follow V8's
// 64-bit layout without pointer compression (as Node ships): 8-byte slots, 16-byte string headers,
// one byte per Latin-1 character and two otherwise. Strings equal in value but distinct in the heap
// cannot be told apart from JavaScript, so a message's strings are counted once per message object.
import type { ChatMessage } from '@dressage/protocol';
import { packedTextsOf, type TextArena } from '../src/packed-text.js';
import type { Session } from '../src/session.js';
import type { TokenBuffer } from '../src/token-buffer.js';

/** A session's bytes by structure. */
export interface SessionFootprint {
  /** Token ids as stored (typed-array capacity) and the ids in use (4 bytes each). */
  tokenIds: number;
  tokenIdsUsed: number;
  /** Logprobs as stored (float32 capacity). */
  logprobs: number;
  /** Version runs and response ranges. */
  versionsAndRanges: number;
  /** Rendered snapshots: one digest per step (the texts are not kept). */
  renderedSnapshots: number;
  /** What is kept of the previous request body: its messages (short) or their digest, the bytes after them. */
  keptRequestBody: number;
  /**
   * The strings and objects of the distinct messages (raw and validated); a packed string counts as
   * its view into the arena.
   */
  messageContents: number;
  /** Message text kept as UTF-8: the arena's chunks ({@link TextArena}). */
  packedText: number;
  /** The message logs the steps share, the request cache's arrays. */
  messageArrays: number;
  /** Step objects and their ids; lineages and segments. */
  steps: number;
  /** Tokens held (ids in use / 4). */
  tokens: number;
}

const slot = 8;
const objectHeader = 24;
const arrayHeader = 32 + 16;

function stringBytes(text: string): number {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: Latin-1 detection.
  return 16 + (/[^\u0000-\u00ff]/.test(text) ? 2 : 1) * text.length;
}

function arrayBytes(length: number): number {
  return arrayHeader + slot * length;
}

// Where a packed text is (a PackedText: chunk, start and end).
const viewBytes = objectHeader + 3 * slot;

// A JSON-like value's strings and objects; a packed field counts as its view, not its text.
function valueBytes(value: unknown): number {
  if (typeof value === 'string') return stringBytes(value);
  if (typeof value !== 'object' || value === null) return 0;
  if (Array.isArray(value)) {
    let total = arrayBytes(value.length);
    for (const item of value) total += valueBytes(item);
    return total;
  }
  const packed = packedTextsOf(value);
  let total = objectHeader;
  if (packed !== undefined) total += slot + objectHeader;
  for (const [key, member] of Object.entries(Object.getOwnPropertyDescriptors(value))) {
    total += slot;
    if (packed?.[key] !== undefined) total += slot + viewBytes;
    else total += valueBytes(member.value);
  }
  return total;
}

// Object overhead only (strings shared with another copy of the same message).
function shellBytes(value: unknown): number {
  if (typeof value !== 'object' || value === null) return 0;
  if (Array.isArray(value)) {
    let total = arrayBytes(value.length);
    for (const item of value) total += shellBytes(item);
    return total;
  }
  let total = objectHeader;
  for (const member of Object.values(value)) total += slot + shellBytes(member);
  return total;
}

/** Counts the bytes of one session's structures. */
export function sessionFootprint(session: Session): SessionFootprint {
  const footprint: SessionFootprint = {
    tokenIds: 0,
    tokenIdsUsed: 0,
    logprobs: 0,
    versionsAndRanges: 0,
    renderedSnapshots: 0,
    keptRequestBody: 0,
    messageContents: 0,
    packedText: 0,
    messageArrays: 0,
    steps: 0,
    tokens: 0,
  };
  const buffers = new Set<TokenBuffer>();
  const messages = new Set<ChatMessage>();
  const logs = new Set<ChatMessage[]>();
  for (const step of session.steps) {
    buffers.add(step.buffer);
    if (step.snapshotDigest !== null) footprint.renderedSnapshots += stringBytes(step.snapshotDigest);
    logs.add(step.messageLog);
    messages.add(step.assistantMessage);
    footprint.steps += objectHeader + 40 * slot + stringBytes(step.stepId);
  }
  for (const log of logs) {
    footprint.messageArrays += arrayBytes(log.length);
    for (const message of log) messages.add(message);
  }
  for (const lineage of session.lineages) {
    footprint.steps += objectHeader + 5 * slot + stringBytes(lineage.id) + arrayBytes(lineage.steps.length);
    for (const segment of lineage.segments) {
      buffers.add(segment.buffer);
      footprint.steps += objectHeader + 7 * slot + arrayBytes(segment.steps.length);
    }
  }
  for (const buffer of buffers) {
    footprint.tokenIds += buffer.idsByteLength;
    footprint.tokenIdsUsed += (buffer.idsByteLength * buffer.length) / Math.max(1, buffer.capacity);
    footprint.tokens += buffer.length;
    footprint.logprobs += buffer.logprobsByteLength;
    footprint.versionsAndRanges +=
      arrayBytes(buffer.versionRuns.length) +
      buffer.versionRuns.length * (objectHeader + 2 * slot) +
      arrayBytes(buffer.responseRanges.length);
    if (buffer.routing !== null) footprint.tokenIds += buffer.routing.data.byteLength;
  }
  // The running hash of the latest snapshot (an OpenSSL digest context, about 0.3 KiB).
  if (session.snapshotHash !== null) footprint.renderedSnapshots += 320;
  const cache = session.requestCache;
  if (cache !== null) {
    if (cache.layout !== null)
      footprint.keptRequestBody +=
        cache.layout.tail.byteLength +
        (cache.layout.messages?.byteLength ?? 0) +
        (cache.layout.messagesDigest === null ? 0 : stringBytes(cache.layout.messagesDigest)) +
        valueBytes(cache.layout.before) +
        valueBytes(cache.layout.after);
    footprint.messageArrays += arrayBytes(cache.rawMessages?.length ?? 0) + arrayBytes(cache.messages.length);
    for (const message of cache.messages) messages.add(message);
    // The raw (parsed) messages share their strings with the validated ones: only their objects count.
    for (const raw of cache.rawMessages ?? []) footprint.messageContents += shellBytes(raw);
  }
  for (const message of messages) footprint.messageContents += valueBytes(message);
  footprint.packedText = session.text?.bytes ?? 0;
  return footprint;
}

/** Adds footprints field by field. */
export function sumFootprints(footprints: readonly SessionFootprint[]): SessionFootprint {
  const total = sessionFootprint({
    steps: [],
    lineages: [],
    requestCache: null,
  } as unknown as Session);
  for (const footprint of footprints)
    for (const key of Object.keys(total) as Array<keyof SessionFootprint>) total[key] += footprint[key];
  return total;
}
