// @dressage/sandbox from its tarball: lease a bubblewrap sandbox, run a command in it with the network
// namespace on, and release it.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalBwrapProvider } from '@dressage/sandbox';
import { shellQuote } from '@dressage/sandbox/internal';

// The building blocks are a subpath of their own.
assert.equal(shellQuote("it's"), `'it'\\''s'`);

const provider = new LocalBwrapProvider({
  slots: 1,
  baseDir: mkdtempSync(join(tmpdir(), 'dressage-sandbox-')),
  unshareNet: true,
  healthIntervalSeconds: 0,
});
try {
  const lease = await provider.create({ trajectoryId: 'consumer-check' });
  const result = await provider.runCommand(lease, 'echo sandboxed && id -u');
  assert.equal(result.returncode, 0);
  assert.match(result.stdout, /^sandboxed\n/);
  await provider.terminate(lease);
  console.log(`ran a command in a bubblewrap sandbox as uid ${result.stdout.split('\n')[1]}`);
} finally {
  await provider.close();
}
