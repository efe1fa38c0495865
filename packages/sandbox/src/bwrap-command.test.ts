import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildBwrapArgs } from './bwrap-command.js';

const directories = {
  home: '/slots/0/home',
  work: '/slots/0/work',
  runtime: '/slots/0/runtime',
  tmp: '/slots/0/tmp',
};

describe('bwrap arguments', () => {
  it('binds extra read-only mounts over the slot directories, so a checkout under /tmp stays visible', () => {
    // A real directory under the host's temporary directory, as a CI checkout would be.
    const checkoutPath = mkdtempSync(join(tmpdir(), 'bwrap-checkout-'));
    const args = buildBwrapArgs(
      {
        directories,
        hostname: 'slot-0',
        readOnlyMounts: ['/usr', checkoutPath, '/usr', checkoutPath],
        env: {},
      },
      ['true'],
    );
    const slotTmp = args.findIndex(
      (value, index) => value === '--bind' && args[index + 1] === '/slots/0/tmp',
    );
    const checkout = args.indexOf(checkoutPath);
    const system = args.indexOf('/usr');
    expect(slotTmp).toBeGreaterThan(0);
    expect(system).toBeLessThan(slotTmp);
    expect(checkout).toBeGreaterThan(slotTmp);
    // Each mount once, the system before the slot, the command last.
    expect(args.filter((value) => value === checkoutPath)).toHaveLength(2);
    expect(args.slice(-2)).toEqual(['--', 'true']);
  });
});
