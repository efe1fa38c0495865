import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { bearerMatches, readSecret, secretsEqual } from './secrets.js';

describe('secrets', () => {
  const directory = mkdtempSync(join(tmpdir(), 'secrets-'));
  afterAll(() => rmSync(directory, { recursive: true, force: true }));

  it('compares secrets of any length without throwing', () => {
    expect(secretsEqual('key-1', 'key-1')).toBe(true);
    expect(secretsEqual('key-1', 'key-2')).toBe(false);
    // timingSafeEqual itself throws on different lengths; the digests never differ in length.
    expect(secretsEqual('k', 'a much longer key')).toBe(false);
    expect(secretsEqual('', 'key')).toBe(false);
  });

  it('matches only a bearer header carrying the key', () => {
    expect(bearerMatches('Bearer key-1', 'key-1')).toBe(true);
    expect(bearerMatches('Bearer key-2', 'key-1')).toBe(false);
    expect(bearerMatches('Basic key-1', 'key-1')).toBe(false);
    expect(bearerMatches('key-1', 'key-1')).toBe(false);
    expect(bearerMatches(undefined, 'key-1')).toBe(false);
  });

  it('reads a secret from a value, a file or the environment, in that order', () => {
    const file = join(directory, 'key');
    writeFileSync(file, 'from-file\n');
    expect(readSecret({ value: 'direct', file, environment: 'env', label: 'key' })).toBe('direct');
    expect(readSecret({ file, environment: 'env', label: 'key' })).toBe('from-file');
    expect(readSecret({ environment: 'env', label: 'key' })).toBe('env');
    expect(readSecret({ label: 'key' })).toBeUndefined();
    const empty = join(directory, 'empty');
    writeFileSync(empty, '\n');
    expect(() => readSecret({ file: empty, label: '--api-key-file' })).toThrow(/--api-key-file: .* is empty/);
    expect(() => readSecret({ file: join(directory, 'missing'), label: '--api-key-file' })).toThrow(
      /cannot read/,
    );
  });
});

describe('secrets on standard input', () => {
  it('reads /dev/stdin from its descriptor, even when it is a socket', async () => {
    const { spawn } = await import('node:child_process');
    const { fileURLToPath } = await import('node:url');
    const module = fileURLToPath(new URL('./secrets.ts', import.meta.url));
    // Node's 'pipe' stdio is a socket pair: opening /dev/stdin by path fails there with ENXIO.
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        `import { readSecret } from ${JSON.stringify(module)}; console.log(readSecret({ file: '/dev/stdin', label: 'k' }));`,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    child.stdin.end('piped-key\n');
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect([code, output.trim()]).toEqual([0, 'piped-key']);
  });
});
