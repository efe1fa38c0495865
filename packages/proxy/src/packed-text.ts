// A session's message text kept as UTF-8. V8 stores a string at two bytes a character as soon as one
// character lies outside Latin-1 (one `✓` in a test run's output is enough), and agents' tool
// outputs usually have one: most of a long session's memory was such text. Once a message is part
// of a session's history, its long two-byte strings move into the session's arena as UTF-8 and the
// message reads them through accessors that decode on each read; the arena's full chunks are kept
// deflated. Reads are rare: the request path compares repeated messages by identity and renders only
// new ones; finalize reads each message once.

import { deflateRaw, inflateRawSync } from 'node:zlib';
import type { ChatMessage } from '@dressage/protocol';

/** Strings shorter than this stay as they are: the accessor and the view cost more than they save. */
export const minPackedLength = 256;

// Arena chunks: small enough that the last, partly filled chunk of a session costs little, large
// enough that a chunk holds many tool outputs and compresses well. Texts over a quarter of a chunk
// get a chunk of their own.
const chunkBytes = 32 * 1024;
const ownBufferBytes = chunkBytes / 4;
// A full chunk is kept deflated when that saves at least an eighth (source code and logs: about
// 2.8× at level 1); level 1 is the fastest, and the text is read rarely.
const deflateOptions = { level: 1 };
const keptRatio = 7 / 8;

// One chunk of an arena: raw UTF-8 while it is filled and until its deflated form is ready.
class Chunk {
  raw: Buffer | null;
  deflated: Buffer | null = null;

  constructor(raw: Buffer) {
    this.raw = raw;
  }
}

// The chunk last inflated: reads of one chunk's texts come together (finalize reads a session's
// messages in order), so each chunk is inflated once for them.
let inflated: { chunk: Chunk; bytes: Buffer } | null = null;

function bytesOf(chunk: Chunk): Buffer {
  if (chunk.raw !== null) return chunk.raw;
  if (inflated?.chunk !== chunk) inflated = { chunk, bytes: inflateRawSync(chunk.deflated!) };
  return inflated.bytes;
}

/** Where one packed string's UTF-8 bytes are: `[start, end)` of an arena chunk. */
export class PackedText {
  readonly #chunk: Chunk;
  readonly #start: number;
  readonly #end: number;

  constructor(chunk: Chunk, start: number, end: number) {
    this.#chunk = chunk;
    this.#start = start;
    this.#end = end;
  }

  /** The text's UTF-8 length. */
  get byteLength(): number {
    return this.#end - this.#start;
  }

  /** The text (decoded, and inflated when its chunk is kept deflated). */
  toString(): string {
    return bytesOf(this.#chunk).toString('utf8', this.#start, this.#end);
  }
}

/**
 * UTF-8 storage for one session's message text: fixed-size chunks, written once, each deflated off
 * the event loop once full.
 */
export class TextArena {
  #chunk: Chunk | null = null;
  #used = 0;
  #pending = 0;
  #settled: Array<() => void> = [];
  /** Bytes held (chunks, raw or deflated). */
  bytes = 0;
  /** Bytes of text written. */
  textBytes = 0;

  /** Writes `text` as UTF-8 and returns where its bytes are. */
  store(text: string): PackedText {
    const length = Buffer.byteLength(text, 'utf8');
    this.textBytes += length;
    if (length > ownBufferBytes) {
      const own = new Chunk(Buffer.allocUnsafeSlow(length));
      own.raw!.write(text, 0, 'utf8');
      this.bytes += length;
      this.#seal(own, length);
      return new PackedText(own, 0, length);
    }
    if (this.#chunk === null || this.#used + length > chunkBytes) {
      if (this.#chunk !== null) this.#seal(this.#chunk, this.#used);
      this.#chunk = new Chunk(Buffer.allocUnsafeSlow(chunkBytes));
      this.#used = 0;
      this.bytes += chunkBytes;
    }
    const start = this.#used;
    this.#chunk.raw!.write(text, start, 'utf8');
    this.#used += length;
    return new PackedText(this.#chunk, start, this.#used);
  }

  /** Resolves once every full chunk's deflating has finished (for measurements and tests). */
  settled(): Promise<void> {
    if (this.#pending === 0) return Promise.resolve();
    return new Promise((resolve) => this.#settled.push(resolve));
  }

  // Deflates a full chunk in the thread pool; it stays raw (and readable) until that is done, and
  // for good when deflating saves little.
  #seal(chunk: Chunk, used: number): void {
    this.#pending++;
    deflateRaw(chunk.raw!.subarray(0, used), deflateOptions, (error, deflated) => {
      if (error === null && deflated.length <= used * keptRatio) {
        this.bytes += deflated.length - chunk.raw!.length;
        chunk.deflated = deflated;
        chunk.raw = null;
      }
      if (--this.#pending === 0) for (const resolve of this.#settled.splice(0)) resolve();
    });
  }
}

// Where a packed object keeps its fields' text, by field name (not enumerable: spreads, JSON and
// Object.keys see only the fields).
const packedFields = Symbol('packed fields');

type PackedObject = { [packedFields]: Record<string, PackedText> } & Record<string, unknown>;

// One accessor pair per field name, shared by every packed object: objects packed alike keep one
// hidden class. Writing a field turns it back into a plain data property.
const descriptors = new Map<string, PropertyDescriptor>();

function descriptorFor(key: string): PropertyDescriptor {
  let descriptor = descriptors.get(key);
  if (descriptor === undefined) {
    descriptor = {
      get(this: PackedObject): string {
        return this[packedFields][key]!.toString();
      },
      set(this: PackedObject, value: unknown) {
        Object.defineProperty(this, key, { value, writable: true, enumerable: true, configurable: true });
      },
      enumerable: true,
      configurable: true,
    };
    descriptors.set(key, descriptor);
  }
  return descriptor;
}

// Two bytes a character in V8: some character lies outside Latin-1.
// biome-ignore lint/suspicious/noControlCharactersInRegex: the Latin-1 range starts at U+0000.
const beyondLatin1 = /[^\u0000-\u00ff]/;
// In a `u` pattern a surrogate pair is one code point: only a lone surrogate matches.
const loneSurrogate = /[\ud800-\udfff]/u;

// Long, two-byte and well-formed: UTF-8 cannot hold a lone surrogate (JSON's `"\ud800"`).
function packable(value: unknown): value is string {
  return (
    typeof value === 'string' &&
    value.length >= minPackedLength &&
    beyondLatin1.test(value) &&
    !loneSurrogate.test(value)
  );
}

// `value` with its long two-byte strings (at any depth) packed into `arena`: the same value when
// there is nothing to pack, else a copy (objects keep their key order). A string equal to the one
// `like` holds packed at the same place reuses its bytes.
function packValue(value: unknown, arena: TextArena, like: unknown): unknown {
  if (typeof value !== 'object' || value === null) return value;
  const likeObject = typeof like === 'object' && like !== null ? (like as Record<string, unknown>) : null;
  if (Array.isArray(value)) {
    const likeArray = Array.isArray(likeObject) ? likeObject : null;
    let copy: unknown[] | null = null;
    for (let index = 0; index < value.length; index++) {
      const item = value[index];
      const packed = packValue(item, arena, likeArray?.[index]);
      if (packed !== item) {
        copy ??= value.slice();
        copy[index] = packed;
      }
    }
    return copy ?? value;
  }
  if (Object.hasOwn(value, packedFields)) return value;
  const record = value as Record<string, unknown>;
  const likeBytes = packedTextsOf(likeObject);
  let changed = false;
  const members: unknown[] = [];
  const keys = Object.keys(record);
  for (const key of keys) {
    const member = record[key];
    let packed: unknown;
    if (packable(member)) {
      const same = likeBytes?.[key];
      packed = same !== undefined && same.toString() === member ? same : arena.store(member);
    } else {
      // A packed field of `like` is a string here, not an object: no need to read it.
      packed = packValue(member, arena, likeBytes?.[key] === undefined ? likeObject?.[key] : undefined);
    }
    if (packed !== member) changed = true;
    members.push(packed);
  }
  if (!changed) return value;
  const copy: Record<string, unknown> = {};
  const fields: Record<string, PackedText> = {};
  Object.defineProperty(copy, packedFields, { value: fields });
  for (let index = 0; index < keys.length; index++) {
    const key = keys[index]!;
    const member = members[index];
    if (member instanceof PackedText) {
      fields[key] = member;
      Object.defineProperty(copy, key, descriptorFor(key));
    } else {
      copy[key] = member;
    }
  }
  return copy;
}

/**
 * The message with its long strings that V8 keeps at two bytes a character stored in `arena` as
 * UTF-8 and read back through accessors: equal field by field, in JSON and in key order. The same
 * object when nothing is worth packing (or it is packed already). Strings equal to those `like` (a
 * packed message) holds at the same place share its bytes: an agent sends back the reply it got.
 */
export function packMessage(message: ChatMessage, arena: TextArena, like?: ChatMessage): ChatMessage {
  return packValue(message, arena, like) as ChatMessage;
}

/** Where an object's packed fields keep their text, by field name; undefined for other values. */
export function packedTextsOf(value: unknown): Readonly<Record<string, PackedText>> | undefined {
  if (typeof value !== 'object' || value === null || !Object.hasOwn(value, packedFields)) return undefined;
  return (value as PackedObject)[packedFields];
}
