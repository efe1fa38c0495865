import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';

/** One prompt record's raw text and where it came from. */
export interface StoredPromptRecord {
  /** The JSON text of the line (or the value itself for in-memory stores). */
  text: string | null;
  /** The value when the store already holds parsed objects. */
  value?: unknown;
  /** File name, or a label for in-memory stores. */
  source: string;
  /** 1-based line number in the file (blank lines counted), or 1-based position in memory. */
  line: number;
}

/** Random access to the prompt records of a data set. */
export interface PromptStore {
  /** Number of records. */
  readonly size: number;
  /** Reads the records at the given 0-based positions, in that order. */
  read(positions: readonly number[]): Promise<StoredPromptRecord[]>;
}

// Growable typed arrays: 16 bytes of index per line, instead of the line itself.
class GrowableIndex {
  starts = new Float64Array(1024);
  lengths = new Uint32Array(1024);
  lines = new Uint32Array(1024);
  size = 0;

  push(start: number, length: number, line: number): void {
    if (this.size === this.starts.length) {
      const capacity = this.size * 2;
      const starts = new Float64Array(capacity);
      starts.set(this.starts);
      const lengths = new Uint32Array(capacity);
      lengths.set(this.lengths);
      const lines = new Uint32Array(capacity);
      lines.set(this.lines);
      this.starts = starts;
      this.lengths = lengths;
      this.lines = lines;
    }
    this.starts[this.size] = start;
    this.lengths[this.size] = length;
    this.lines[this.size] = line;
    this.size++;
  }

  // Drops the growth slack once the file is indexed.
  trim(): void {
    this.starts = this.starts.slice(0, this.size);
    this.lengths = this.lengths.slice(0, this.size);
    this.lines = this.lines.slice(0, this.size);
  }

  get bytes(): number {
    return this.starts.byteLength + this.lengths.byteLength + this.lines.byteLength;
  }
}

const NEWLINE = 0x0a;

function isBlankByte(byte: number): boolean {
  return byte === 0x20 || byte === 0x09 || byte === 0x0d;
}

/**
 * A JSONL file indexed by byte offset. Opening streams the file once to record where each non-blank
 * line starts; records are then read one by one with positional reads, so memory grows with the
 * number of lines (16 bytes each), never with the file's size.
 */
export class JsonlPromptStore implements PromptStore {
  readonly #index: GrowableIndex;

  private constructor(
    readonly path: string,
    index: GrowableIndex,
  ) {
    this.#index = index;
  }

  /** Indexes `path`. Fails with `not_found`-style Node errors when the file cannot be read. */
  static async open(path: string): Promise<JsonlPromptStore> {
    const index = new GrowableIndex();
    let offset = 0;
    let line = 1;
    let lineStart = 0;
    let blank = true;
    const stream = createReadStream(path, { highWaterMark: 1 << 20 });
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      let from = 0;
      // A UTF-8 byte-order mark is not part of the first record.
      if (offset === 0 && chunk[0] === 0xef && chunk[1] === 0xbb && chunk[2] === 0xbf) {
        from = 3;
        lineStart = 3;
      }
      for (let i = from; i < chunk.length; i++) {
        const byte = chunk[i] as number;
        if (byte === NEWLINE) {
          const end = offset + i;
          if (!blank) index.push(lineStart, end - lineStart, line);
          line++;
          lineStart = end + 1;
          blank = true;
        } else if (blank && !isBlankByte(byte)) {
          blank = false;
        }
      }
      offset += chunk.length;
    }
    if (!blank) index.push(lineStart, offset - lineStart, line);
    index.trim();
    return new JsonlPromptStore(path, index);
  }

  get size(): number {
    return this.#index.size;
  }

  /** Bytes the line index holds (16 per record), whatever the file's size. */
  get indexBytes(): number {
    return this.#index.bytes;
  }

  async read(positions: readonly number[]): Promise<StoredPromptRecord[]> {
    if (positions.length === 0) return [];
    const handle = await open(this.path, 'r');
    try {
      const records: StoredPromptRecord[] = [];
      for (const position of positions) {
        const length = this.#index.lengths[position] as number;
        const buffer = Buffer.allocUnsafe(length);
        const { bytesRead } = await handle.read(buffer, 0, length, this.#index.starts[position] as number);
        records.push({
          text: buffer.toString('utf8', 0, bytesRead),
          source: this.path,
          line: this.#index.lines[position] as number,
        });
      }
      return records;
    } finally {
      await handle.close();
    }
  }
}

/** Prompt records already in memory (tests, generated data sets). */
export class InMemoryPromptStore implements PromptStore {
  readonly #records: readonly unknown[];
  readonly #label: string;

  constructor(records: readonly unknown[], label = '(memory)') {
    this.#records = records;
    this.#label = label;
  }

  get size(): number {
    return this.#records.length;
  }

  async read(positions: readonly number[]): Promise<StoredPromptRecord[]> {
    return positions.map((position) => ({
      text: null,
      value: this.#records[position],
      source: this.#label,
      line: position + 1,
    }));
  }
}
