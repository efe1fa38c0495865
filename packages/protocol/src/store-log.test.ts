import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readLines, storeLineProblem } from './store-log.js';

describe('the trajectory log', () => {
  it('reads lines with their offsets, the last one unterminated', () => {
    const directory = mkdtempSync(join(tmpdir(), 'store-log-'));
    try {
      const path = join(directory, 'log.jsonl');
      writeFileSync(path, 'first\n\nthird line\ntorn');
      const descriptor = openSync(path, 'r');
      const seen: [number, string, boolean][] = [];
      try {
        readLines(descriptor, 22, (offset, line, terminated) =>
          seen.push([offset, line.toString(), terminated]),
        );
      } finally {
        closeSync(descriptor);
      }
      expect(seen).toEqual([
        [0, 'first', true],
        [6, '', true],
        [7, 'third line', true],
        [18, 'torn', false],
      ]);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it('names what is wrong with a line that is not a record', () => {
    expect(storeLineProblem('{"op":"drop","trajectory_id":"t1"}')).toEqual({
      line: { op: 'drop', trajectory_id: 't1' },
    });
    expect(storeLineProblem('{"op":"drop"')).toEqual({ problem: 'not JSON (cut short or overwritten)' });
    expect(storeLineProblem('{"op":"drop","trajectory_id":""}')).toMatchObject({
      problem: expect.stringContaining('trajectory_id'),
    });
  });
});
