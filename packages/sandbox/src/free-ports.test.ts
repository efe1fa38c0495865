import { createServer } from 'node:net';
import { describe, expect, it } from 'vitest';
import { findFreePortRange } from './free-ports.js';

describe('findFreePortRange', () => {
  it('finds consecutive ports that can be bound, avoiding one in use', async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as { port: number }).port;
    try {
      // A range of one around the taken port can only be the other one.
      const base = await findFreePortRange(1, { from: port, to: port + 2 });
      expect(base).toBe(port + 1);
      const wide = await findFreePortRange(4);
      for (let offset = 0; offset < 4; offset++) {
        const probe = createServer();
        await new Promise<void>((resolve, reject) => {
          probe.once('error', reject);
          probe.listen(wide + offset, '127.0.0.1', resolve);
        });
        await new Promise<void>((resolve) => probe.close(() => resolve()));
      }
    } finally {
      taken.close();
    }
  });
});
