import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { readLines } from '@dressage/protocol/internal';

/** Calls back with each non-empty line of a file and its byte offset and length (newline included). */
export function forEachLine(
  path: string,
  onLine: (line: string, offset: number, byteLength: number) => void,
): void {
  const descriptor = openSync(path, 'r');
  try {
    readLines(descriptor, fstatSync(descriptor).size, (offset, line, terminated) => {
      if (line.length > 0) onLine(line.toString('utf8'), offset, line.length + (terminated ? 1 : 0));
    });
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
