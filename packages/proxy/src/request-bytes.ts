// Chat request bodies as bytes. Agents resend the whole conversation on every call, so a body
// usually starts with the bytes of the session's previous body up to the end of its last message.
// Those messages need no parsing: only the bytes after them are parsed, and the result equals what
// JSON.parse of the whole body gives (anything unexpected falls back to parsing it whole). The
// previous body is not kept: its bytes up to the end of its messages are, while short (comparing
// them costs less than hashing the next body); beyond that their SHA-256 stands for them.

import { createHash, type Hash } from 'node:crypto';
import { detailError } from './http-error.js';

const quote = 0x22;
const backslash = 0x5c;
const comma = 0x2c;
const colon = 0x3a;
const openBrace = 0x7b;
const closeBrace = 0x7d;
const openBracket = 0x5b;
const closeBracket = 0x5d;
const messagesKey = Buffer.from('messages');

/**
 * Where the top-level `messages` array of a JSON body lies, and the other top-level members as
 * parsed: what the next body of the session is compared with. Its size does not grow with the
 * conversation: the bytes up to the end of the last message are kept as they are up to
 * {@link keptMessageBytes}, as their SHA-256 beyond.
 */
export interface BodyLayout {
  /** Elements of the `messages` array. */
  messageCount: number;
  /** Offset just past the last element (0 without elements). */
  messagesEnd: number;
  /** The bytes `[0, messagesEnd)` (a copy) when they are at most {@link keptMessageBytes}, else null. */
  messages: Buffer | null;
  /** SHA-256 (base64) of the bytes `[0, messagesEnd)` when {@link messages} is null, else null. */
  messagesDigest: string | null;
  /** The bytes from the array's closing bracket to the end of the body (a copy). */
  tail: Buffer;
  /** Top-level members before `messages`, as JSON.parse gives them. */
  before: RawBodyMembers;
  /** Top-level members after the `messages` array. */
  after: RawBodyMembers;
}

/**
 * Top-level members of a chat request body other than `messages`, as JSON.parse gives them: the
 * proxy compares `tools` with the previous request's; the rest is validated with the body.
 */
export interface RawBodyMembers {
  tools?: unknown;
  session_id?: unknown;
  [member: string]: unknown;
}

/** A chat request body as JSON.parse gives it, once known to be an object with a `messages` array. */
export interface RawChatBody extends RawBodyMembers {
  messages: unknown[];
}

/** A body parsed against the previous one of its session. */
export interface ContinuedBody {
  layout: BodyLayout;
  /** How many leading messages are the previous body's, byte for byte. */
  repeated: number;
  /** The messages after those, parsed. */
  appended: unknown[];
  /** True when the members after `messages` are the previous body's, byte for byte. */
  sameAfter: boolean;
}

/**
 * Deepest nesting of arrays and objects a request body may have. JSON.parse takes any depth, but
 * validation, comparison, rendering and serialization recurse: a body nested thousands deep would
 * overflow the stack later (and, once recorded, on every finalize).
 */
export const maxJsonDepth = 64;

// True when `value` nests arrays and objects more than `limit` deep; iterative, for the same reason.
function deeperThan(value: unknown, limit: number): boolean {
  const values: unknown[] = [value];
  const depths: number[] = [1];
  while (values.length > 0) {
    const current = values.pop();
    const depth = depths.pop() as number;
    if (typeof current !== 'object' || current === null) continue;
    if (depth > limit) return true;
    for (const child of Array.isArray(current) ? current : Object.values(current)) {
      if (typeof child !== 'object' || child === null) continue;
      values.push(child);
      depths.push(depth + 1);
    }
  }
  return false;
}

function tooDeep(field: string): never {
  throw detailError(400, `${field} is nested deeper than ${maxJsonDepth} levels of arrays and objects`);
}

/**
 * Checks that the members of a parsed body (each element, for an array member such as `messages`)
 * stay within {@link maxJsonDepth}.
 *
 * @throws ProxyHttpError 400 naming the member (`messages[3]`, `tools`, `label`, …).
 */
export function checkJsonDepth(body: unknown): void {
  if (typeof body !== 'object' || body === null) return;
  if (Array.isArray(body)) {
    if (deeperThan(body, maxJsonDepth)) tooDeep('the body');
    return;
  }
  for (const [key, member] of Object.entries(body)) {
    if (Array.isArray(member)) {
      for (let index = 0; index < member.length; index++)
        if (deeperThan(member[index], maxJsonDepth - 2)) tooDeep(`${key}[${index}]`);
    } else if (deeperThan(member, maxJsonDepth - 1)) tooDeep(key);
  }
}

/**
 * Parses a request body; an empty body is `undefined`.
 *
 * @throws ProxyHttpError 400 `Malformed JSON body: …` when it is not JSON, or naming the member
 *   nested deeper than {@link maxJsonDepth}.
 */
export function parseJson(bytes: Buffer): unknown {
  if (bytes.length === 0) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch (error) {
    throw detailError(400, `Malformed JSON body: ${(error as Error).message}`);
  }
  checkJsonDepth(body);
  return body;
}

function isSpace(byte: number | undefined): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

function skipSpace(bytes: Buffer, position: number): number {
  while (isSpace(bytes[position])) position++;
  return position;
}

// Offset just past the string opening at `position`, or -1 when it does not close.
function skipString(bytes: Buffer, position: number): number {
  let from = position + 1;
  for (;;) {
    const close = bytes.indexOf(quote, from);
    if (close === -1) return -1;
    let escapes = 0;
    for (let index = close - 1; bytes[index] === backslash; index--) escapes++;
    if (escapes % 2 === 0) return close + 1;
    from = close + 1;
  }
}

// Offset just past the JSON value starting at `position`, or -1. Only brackets and strings are
// tracked: the pieces cut out this way are parsed by JSON.parse, which rejects anything malformed.
function skipValue(bytes: Buffer, position: number): number {
  const first = bytes[position];
  if (first === quote) return skipString(bytes, position);
  if (first !== openBrace && first !== openBracket) {
    while (position < bytes.length) {
      const byte = bytes[position];
      if (byte === comma || byte === closeBrace || byte === closeBracket || isSpace(byte)) break;
      position++;
    }
    return position;
  }
  let depth = 0;
  while (position < bytes.length) {
    const byte = bytes[position]!;
    if (byte === quote) {
      position = skipString(bytes, position);
      if (position === -1) return -1;
      continue;
    }
    if (byte === openBrace || byte === openBracket) depth++;
    else if (byte === closeBrace || byte === closeBracket) {
      depth--;
      if (depth === 0) return position + 1;
    }
    position++;
  }
  return -1;
}

// The elements of an array from `position` (just past `[` or past an element): their end offsets
// are pushed to `ends`; returns the offset of the closing bracket, or -1. Elements must be objects.
function scanElements(bytes: Buffer, position: number, ends: number[], first: boolean): number {
  for (;;) {
    position = skipSpace(bytes, position);
    const byte = bytes[position];
    if (byte === closeBracket) return position;
    if (!first) {
      if (byte !== comma) return -1;
      position = skipSpace(bytes, position + 1);
    }
    if (bytes[position] !== openBrace) return -1;
    position = skipValue(bytes, position);
    if (position === -1) return -1;
    ends.push(position);
    first = false;
  }
}

/**
 * Most bytes of messages a layout keeps as they are; more are kept as their SHA-256. Comparing the
 * kept bytes costs a `memcmp` where the digest costs hashing the next body (and two hash objects),
 * while a session still keeps a bounded amount whatever the length of its conversation.
 */
export const keptMessageBytes = 16 * 1024;

// What a layout keeps of `bytes[0, end)`: the bytes when short, else their digest, continuing `hash`
// (already fed `bytes[0, from)`) when there is one.
function messagesOf(
  bytes: Buffer,
  end: number,
  hash: Hash | null,
  from: number,
): Pick<BodyLayout, 'messages' | 'messagesDigest'> {
  if (end <= keptMessageBytes) return { messages: Buffer.from(bytes.subarray(0, end)), messagesDigest: null };
  if (hash === null) {
    hash = createHash('sha256');
    from = 0;
  }
  if (end > from) hash.update(bytes.subarray(from, end));
  return { messages: null, messagesDigest: hash.digest('base64') };
}

// Parses the members after the array's closing bracket; null when they are malformed or name
// `messages` again (JSON.parse would take that later array).
function parseAfter(bytes: Buffer, close: number): RawBodyMembers | null {
  try {
    const members: RawBodyMembers = JSON.parse(`{"messages":0${bytes.toString('utf8', close + 1)}`);
    if (members.messages !== 0) return null;
    delete members.messages;
    return members;
  } catch {
    return null;
  }
}

/**
 * The layout of a body (one scan), or null when it is not an object with a `messages` array of
 * objects, or is malformed. Call it on bodies that JSON.parse accepted.
 */
export function layoutOf(bytes: Buffer): BodyLayout | null {
  let position = skipSpace(bytes, 0);
  if (bytes[position] !== openBrace) return null;
  position++;
  for (let member = 0; ; member++) {
    position = skipSpace(bytes, position);
    if (member > 0) {
      if (bytes[position] !== comma) return null;
      position = skipSpace(bytes, position + 1);
    }
    if (bytes[position] !== quote) return null;
    const keyEnd = skipString(bytes, position);
    if (keyEnd === -1) return null;
    // An escaped spelling of `messages` is not recognised: such bodies are simply parsed whole.
    const isMessages =
      keyEnd - position - 2 === messagesKey.length &&
      bytes.compare(messagesKey, 0, messagesKey.length, position + 1, keyEnd - 1) === 0;
    position = skipSpace(bytes, keyEnd);
    if (bytes[position] !== colon) return null;
    position = skipSpace(bytes, position + 1);
    if (!isMessages) {
      position = skipValue(bytes, position);
      if (position === -1) return null;
      continue;
    }
    if (bytes[position] !== openBracket) return null;
    const messageEnds: number[] = [];
    const close = scanElements(bytes, position + 1, messageEnds, true);
    if (close === -1) return null;
    const after = parseAfter(bytes, close);
    if (after === null) return null;
    let before: RawBodyMembers;
    try {
      before = JSON.parse(`${bytes.toString('utf8', 0, position)}0}`);
    } catch {
      return null;
    }
    delete before.messages;
    const messagesEnd = messageEnds.at(-1) ?? 0;
    return {
      messageCount: messageEnds.length,
      messagesEnd,
      ...messagesOf(bytes, messagesEnd, null, 0),
      tail: Buffer.from(bytes.subarray(close)),
      before,
      after,
    };
  }
}

/**
 * Parses `bytes` as a continuation of `previous`: when it repeats the previous body byte for byte up
 * to the end of its last message (the kept bytes, or their SHA-256), only the rest is parsed. Null when it does not, or when anything
 * after that point is unexpected; the caller then parses the body whole.
 *
 * @throws ProxyHttpError 400 when what it parsed is nested deeper than {@link maxJsonDepth}.
 */
export function continueBody(previous: BodyLayout, bytes: Buffer): ContinuedBody | null {
  const repeated = previous.messageCount;
  if (repeated === 0) return null;
  const end = previous.messagesEnd;
  if (bytes.length <= end) return null;
  let hash: Hash | null = null;
  if (previous.messages !== null) {
    if (bytes.compare(previous.messages, 0, end, 0, end) !== 0) return null;
  } else {
    // One pass of the hash over the body's messages: up to the previous end it must give the
    // previous digest; through the new messages it is the next layout's digest.
    hash = createHash('sha256').update(bytes.subarray(0, end));
    if (hash.copy().digest('base64') !== previous.messagesDigest) return null;
  }
  const messageEnds: number[] = [];
  const close = scanElements(bytes, end, messageEnds, false);
  if (close === -1) return null;
  let appended: unknown[] = [];
  if (messageEnds.length > 0) {
    const start = skipSpace(bytes, end) + 1; // past the comma
    try {
      appended = JSON.parse(`[${bytes.toString('utf8', start, close)}]`) as unknown[];
    } catch {
      return null;
    }
    if (appended.length !== messageEnds.length) return null;
    for (let index = 0; index < appended.length; index++)
      if (deeperThan(appended[index], maxJsonDepth - 2)) tooDeep(`messages[${repeated + index}]`);
  }
  const tail = bytes.subarray(close);
  const sameAfter = tail.equals(previous.tail);
  const after = sameAfter ? previous.after : parseAfter(bytes, close);
  if (after === null) return null;
  if (!sameAfter) checkJsonDepth(after);
  const messagesEnd = messageEnds.at(-1) ?? end;
  return {
    layout: {
      messageCount: repeated + messageEnds.length,
      messagesEnd,
      ...messagesOf(bytes, messagesEnd, hash, end),
      tail: sameAfter ? previous.tail : Buffer.from(tail),
      before: previous.before,
      after,
    },
    repeated,
    appended,
    sameAfter,
  };
}
