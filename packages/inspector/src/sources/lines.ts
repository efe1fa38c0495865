import { closeSync, openSync, readSync } from 'node:fs';

const chunkSize = 8 * 1024 * 1024;

/** Calls back with each non-empty line of a file and its byte offset and length (newline included). */
export function forEachLine(
  path: string,
  onLine: (line: string, offset: number, byteLength: number) => void,
): void {
  const descriptor = openSync(path, 'r');
  try {
    let carry = Buffer.alloc(0);
    let carryOffset = 0;
    const chunk = Buffer.alloc(chunkSize);
    for (;;) {
      const read = readSync(descriptor, chunk, 0, chunkSize, null);
      if (read <= 0) break;
      const data =
        carry.length > 0 ? Buffer.concat([carry, chunk.subarray(0, read)]) : chunk.subarray(0, read);
      let start = 0;
      for (;;) {
        const newline = data.indexOf(10, start);
        if (newline === -1) break;
        if (newline > start)
          onLine(data.toString('utf8', start, newline), carryOffset + start, newline + 1 - start);
        start = newline + 1;
      }
      carryOffset += start;
      // Copy: `chunk` is reused by the next read.
      carry = Buffer.from(data.subarray(start));
    }
    if (carry.length > 0) onLine(carry.toString('utf8'), carryOffset, carry.length);
  } finally {
    closeSync(descriptor);
  }
}

/** Reads one line back by its offset and length. */
export function readLineAt(path: string, offset: number, byteLength: number): string {
  const buffer = Buffer.alloc(byteLength);
  const descriptor = openSync(path, 'r');
  try {
    readSync(descriptor, buffer, 0, byteLength, offset);
  } finally {
    closeSync(descriptor);
  }
  return buffer.toString('utf8').trimEnd();
}
