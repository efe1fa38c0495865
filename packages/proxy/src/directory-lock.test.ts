import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DressageError } from '@dressage/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { lockDirectory } from './directory-lock.js';
import { lockStoreDirectory } from './store-lock.js';

const options = { file: 'run.lock', subject: 'the run directory', remedy: 'give this run its own directory' };
const moduleUrl = new URL('./directory-lock.ts', import.meta.url).href;
const packageRoot = fileURLToPath(new URL('..', import.meta.url));
const children: ChildProcess[] = [];

// Another process holding the lock until it is killed; resolves once it holds it.
function holdInChild(directory: string): Promise<ChildProcess> {
  const script = `const { lockDirectory } = await import(${JSON.stringify(moduleUrl)});
lockDirectory(${JSON.stringify(directory)}, ${JSON.stringify(options)});
process.stdout.write('held\\n');
setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: packageRoot,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (data: Buffer) => {
      if (data.toString().includes('held')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`the holder exited with ${code}`)));
  });
}

function refusal(run: () => unknown): DressageError {
  try {
    run();
  } catch (error) {
    if (error instanceof DressageError) return error;
    throw error;
  }
  throw new Error('expected a refusal');
}

afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
});

describe('lockDirectory', () => {
  it('refuses a directory another process holds, naming it, until that process dies', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'dressage-lock-'));
    const holder = await holdInChild(directory);
    const error = refusal(() => lockDirectory(directory, options));
    expect(error.code).toBe('failed_precondition');
    expect(error.message).toBe(
      `the run directory is in use by process ${holder.pid} (give this run its own directory)`,
    );
    // SIGKILL leaves no stale lock: the kernel drops it with the holder's descriptor.
    holder.kill('SIGKILL');
    await new Promise((resolve) => holder.once('exit', resolve));
    const lock = lockDirectory(directory, options);
    expect(JSON.parse(readFileSync(lock.path, 'utf8')).pid).toBe(process.pid);
    lock.release();
  });

  it('refuses a second hold within one process, and allows it after release', () => {
    const directory = mkdtempSync(join(tmpdir(), 'dressage-lock-'));
    const first = lockDirectory(directory, options);
    expect(refusal(() => lockDirectory(directory, options)).code).toBe('failed_precondition');
    first.release();
    first.release();
    lockDirectory(directory, options).release();
  });

  it('locks a store with its own file and message', () => {
    const directory = mkdtempSync(join(tmpdir(), 'dressage-lock-'));
    const store = lockStoreDirectory(directory);
    expect(store.path).toBe(join(directory, 'LOCK'));
    // A run lock on the same directory is another file: both can be held.
    const run = lockDirectory(directory, options);
    const error = refusal(() => lockStoreDirectory(directory));
    expect(error.message).toBe(
      `the trajectory store ${directory} is in use by process ${process.pid} (one process per store: stop that process, or give this one its own --store-dir)`,
    );
    run.release();
    store.release();
  });
});
