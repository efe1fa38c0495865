import { describe, expect, it } from 'vitest';
import { sleep, Waiters } from './waiting.js';

describe('waiting', () => {
  it('wakes every waiter at once, and a waiter with a timeout at its timeout', async () => {
    const waiters = new Waiters();
    const woken = [waiters.wait(), waiters.wait({ timeoutMs: 60_000 })];
    expect(waiters.size).toBe(2);
    waiters.wakeAll();
    expect(await Promise.all(woken)).toEqual([true, true]);
    expect(waiters.size).toBe(0);
    const timedOut = waiters.wait({ timeoutMs: 5 });
    await sleep(20);
    expect(await timedOut).toBe(false);
    // The timed-out waiter is gone: a wake finds no one.
    expect(waiters.size).toBe(0);
    const controller = new AbortController();
    const aborted = waiters.wait({ signal: controller.signal });
    controller.abort();
    expect([await aborted, waiters.size]).toEqual([false, 0]);
  });
});
