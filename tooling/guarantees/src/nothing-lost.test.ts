// Nothing lost: a trajectory the proxy answered 200 for is readable after the proxy dies, whatever
// else was happening (drains, a full disk).
import { execFileSync } from 'node:child_process';
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineStub } from './engine-stub.js';
import { chatBody, startQwenEngineStub, temporaryDirectory } from './fixtures.js';
import { call, type ProxyProcess, proxyBin, startProxyProcess } from './proxy-process.js';
import { mountTmpfs } from './tmpfs.js';

let engine: EngineStub;
beforeAll(async () => {
  engine = await startQwenEngineStub();
});
afterAll(async () => {
  await engine?.close();
});

type Json = Awaited<ReturnType<typeof call>>['body'];

// One turn, then finalize: the status that decided, and how many segments finalize stored.
async function recordCounted(
  proxy: ProxyProcess,
  session: string,
): Promise<{ status: number; segments: number }> {
  const chat = await call(proxy.url, '/v1/chat/completions', chatBody(`task ${session}`), {
    'x-session-id': session,
  });
  if (chat.status !== 200) return { status: chat.status, segments: 0 };
  const finalize = await call(proxy.url, '/session/finalize', { session_id: session });
  return { status: finalize.status, segments: Number(finalize.body.num_segments) };
}

async function record(proxy: ProxyProcess, session: string): Promise<number> {
  return (await recordCounted(proxy, session)).status;
}

// Every segment of a stored trajectory carries the session's own prompt and a trainable response.
function expectTrajectoryOf(session: string, data: Json[], segments?: number): void {
  expect(data.length, `trajectory ${session}`).toBeGreaterThan(0);
  if (segments !== undefined) expect(data.length, `segments of ${session}`).toBe(segments);
  for (const segment of data) {
    expect((segment.messages as Array<{ content: string }>)[0]?.content).toBe(`task ${session}`);
    expect((segment.full_loss_mask as number[]).some((bit) => bit === 1)).toBe(true);
  }
}

describe('nothing lost', () => {
  it('a second proxy on the same store is refused with exit 2 naming the directory and the holder', async () => {
    const store = temporaryDirectory();
    try {
      const first = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        expect(await record(first, 'first')).toBe(200);
        const refused = startProxyProcess(engine.url, ['--store-dir', store.path]);
        await expect(refused).rejects.toThrow(/exited with 2/);
        const message = await refused.catch((error: Error) => error.message);
        expect(message).toContain(store.path);
        expect(message).toContain(`process ${first.child.pid}`);
        // The first one keeps serving, and what it confirmed is whole.
        expect(await record(first, 'second')).toBe(200);
      } finally {
        await first.kill();
      }
      // SIGKILL leaves no stale lock: the kernel let go of it with the process.
      const next = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        for (const session of ['first', 'second']) {
          const read = await call(next.url, '/trajectory/read', { trajectory_id: session });
          expectTrajectoryOf(session, read.body.data as Json[]);
        }
      } finally {
        await next.kill();
      }
    } finally {
      store.remove();
    }
  });

  it("a new run never sees an earlier run's trajectories unless it adopts them", async () => {
    const folder = temporaryDirectory();
    const store = temporaryDirectory();
    try {
      // Two proxies started in one folder with the default store: each has its own.
      const [first, second] = await Promise.all([
        startProxyProcess(engine.url, [], { cwd: folder.path }),
        startProxyProcess(engine.url, [], { cwd: folder.path }),
      ]);
      try {
        expect(await record(first, 'old-run')).toBe(200);
        const read = await call(second.url, '/trajectory/read', { max_groups: 2, drain: true });
        expect(read.status).toBe(200);
        expect(read.body.data).toEqual([]);
        expect(first.output()).toMatch(/store \S+ \(run proxy-\S+\): empty/);
      } finally {
        await Promise.all([first.kill(), second.kill()]);
      }
      // Started again in that folder: a new run, an empty store.
      const again = await startProxyProcess(engine.url, [], { cwd: folder.path });
      try {
        expect((await call(again.url, '/trajectory/read', { max_groups: 2, drain: true })).body.data).toEqual(
          [],
        );
        expect((await call(again.url, '/trajectory/read', { trajectory_id: 'old-run' })).body.data).toEqual(
          [],
        );
      } finally {
        await again.kill();
      }
      // The same run, restarted (after a crash): its own trajectories, with a line saying so.
      const runA = await startProxyProcess(engine.url, ['--run-id', 'run-a'], { cwd: folder.path });
      try {
        expect(await record(runA, 'kept-a')).toBe(200);
      } finally {
        await runA.kill();
      }
      const resumed = await startProxyProcess(engine.url, ['--run-id', 'run-a'], { cwd: folder.path });
      try {
        expectTrajectoryOf(
          'kept-a',
          (await call(resumed.url, '/trajectory/read', { trajectory_id: 'kept-a' })).body.data as Json[],
        );
        expect(resumed.output()).toMatch(
          /\(run run-a\): recovered 1 trajectories not yet read, finalized \d+ s to \d+ s ago/,
        );
      } finally {
        await resumed.kill();
      }
      // A named store another run wrote is refused, unless adopted.
      const writer = await startProxyProcess(engine.url, ['--store-dir', store.path, '--run-id', 'run-a']);
      try {
        expect(await record(writer, 'of-run-a')).toBe(200);
      } finally {
        await writer.kill();
      }
      const refused = await startProxyProcess(engine.url, [
        '--store-dir',
        store.path,
        '--run-id',
        'run-b',
      ]).catch((error: Error) => error.message);
      expect(refused).toMatch(/exited with 2/);
      expect(refused).toContain('run run-a');
      expect(refused).toContain('--adopt-store');
      const adopter = await startProxyProcess(engine.url, [
        '--store-dir',
        store.path,
        '--run-id',
        'run-b',
        '--adopt-store',
      ]);
      try {
        expect(adopter.output()).toContain('adopted from run run-a): recovered 1 trajectories');
        expectTrajectoryOf(
          'of-run-a',
          (await call(adopter.url, '/trajectory/read', { trajectory_id: 'of-run-a' })).body.data as Json[],
        );
      } finally {
        await adopter.kill();
      }
    } finally {
      folder.remove();
      store.remove();
    }
  });

  it.each([
    ['a line cut short', (line: string) => line.slice(0, Math.floor(line.length / 2))],
    ['valid JSON that is no record', () => '{"op":"put","hello":1}'],
    ['a record with a renamed field', (line: string) => line.replace('"trajectory_id"', '"trajectoryId"')],
  ])(
    'a log damaged in the middle (%s) is refused, never rewritten; repair-store quarantines it',
    async (_, damage) => {
      const store = temporaryDirectory();
      try {
        const writer = await startProxyProcess(engine.url, ['--store-dir', store.path]);
        try {
          for (const session of ['one', 'two', 'three']) expect(await record(writer, session)).toBe(200);
        } finally {
          await writer.kill();
        }
        const log = join(store.path, 'trajectories.jsonl');
        const lines = readFileSync(log, 'utf8').split('\n');
        expect(lines).toHaveLength(4);
        lines[1] = damage(lines[1] as string);
        writeFileSync(log, lines.join('\n'));
        const damaged = readFileSync(log);
        const refused = await startProxyProcess(engine.url, ['--store-dir', store.path]).catch(
          (error: Error) => error.message,
        );
        expect(refused).toMatch(/exited with 2/);
        expect(refused).toContain('line 2');
        expect(refused).toContain(`dressage-proxy repair-store --store-dir ${store.path}`);
        expect(readFileSync(log).equals(damaged)).toBe(true); // nothing rewritten away
        const repaired = execFileSync(
          process.execPath,
          [proxyBin, 'repair-store', '--store-dir', store.path],
          {
            encoding: 'utf8',
          },
        );
        expect(repaired).toContain('moved 1 damaged line');
        expect(readFileSync(join(store.path, 'trajectories.quarantine.jsonl'), 'utf8')).toBe(`${lines[1]}\n`);
        const next = await startProxyProcess(engine.url, ['--store-dir', store.path]);
        try {
          for (const session of ['one', 'three'])
            expectTrajectoryOf(
              session,
              (await call(next.url, '/trajectory/read', { trajectory_id: session })).body.data as Json[],
            );
        } finally {
          await next.kill();
        }
      } finally {
        store.remove();
      }
    },
  );

  it('a torn last line (an append that did not finish) is dropped with a log line', async () => {
    const store = temporaryDirectory();
    try {
      const writer = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        expect(await record(writer, 'whole')).toBe(200);
      } finally {
        await writer.kill();
      }
      const log = join(store.path, 'trajectories.jsonl');
      const line = readFileSync(log, 'utf8');
      appendFileSync(log, line.slice(0, 100)); // no newline: the append was cut
      const next = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        expect(next.output()).toContain('dropped a torn last line');
        expectTrajectoryOf(
          'whole',
          (await call(next.url, '/trajectory/read', { trajectory_id: 'whole' })).body.data as Json[],
        );
      } finally {
        await next.kill();
      }
    } finally {
      store.remove();
    }
  });

  it('a finalized trajectory survives SIGKILL of the proxy and reads back after a restart', async () => {
    const store = temporaryDirectory();
    try {
      const first = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      let before: unknown;
      try {
        expect(await record(first, 'kept')).toBe(200);
        before = (await call(first.url, '/trajectory/read', { trajectory_id: 'kept' })).body.data;
      } finally {
        await first.kill();
      }
      const second = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        const after = await call(second.url, '/trajectory/read', { trajectory_id: 'kept' });
        expect(after.body.data).toEqual(before);
        expectTrajectoryOf('kept', after.body.data as Json[]);
      } finally {
        await second.kill();
      }
    } finally {
      store.remove();
    }
  });

  it('every finalize and drain answered 200 holds after SIGKILL at random points of concurrent traffic', async () => {
    const store = temporaryDirectory();
    // Finalize answered 200 (with this many segments), no drain of it answered 200.
    const finalized = new Map<string, number>();
    const drained = new Set<string>(); // a drain answered 200 with its data
    // Drains sent whose answer never came (the kill cut it off): the drain may or may not have
    // happened, so such a trajectory is either whole or gone, never required.
    const unanswered = new Map<string, number>();
    let next = 0;
    // Every trajectory still there after a restart is whole; every one the promise covers is there.
    const expectPromiseKept = async (proxy: ProxyProcess) => {
      for (const [session, segments] of finalized) {
        const read = await call(proxy.url, '/trajectory/read', { trajectory_id: session });
        const data = read.body.data as Json[];
        if ((unanswered.get(session) ?? 0) > 0 && data.length === 0) {
          finalized.delete(session);
          drained.add(session); // its drain landed; it must stay gone
          continue;
        }
        expectTrajectoryOf(session, data, segments);
      }
      for (const session of drained) {
        const read = await call(proxy.url, '/trajectory/read', { trajectory_id: session });
        expect(read.body.data, `drained ${session}`).toEqual([]);
      }
      unanswered.clear();
    };
    try {
      for (let round = 0; round < 4; round++) {
        // Every other round evicts token data to the log at once (10 KB resident): reads then
        // come back from the log, which a compaction racing a finalize used to cut.
        const eviction = round % 2 === 1 ? ['--store-memory-limit-mb', '0.01'] : [];
        const proxy = await startProxyProcess(engine.url, ['--store-dir', store.path, ...eviction]);
        await expectPromiseKept(proxy);
        let stopped = false;
        const kept = new Set<string>();
        // Traffic enough for a kill to land among finalizes and drains, however slow the machine:
        // the kill waits for this many answered finalizes and at least one answered drain.
        const finalizesBeforeKill = 4 + Math.floor(Math.random() * 8);
        let finalizesAnswered = 0;
        let drainsAnswered = 0;
        let enough: () => void = () => undefined;
        const enoughTraffic = new Promise<void>((resolve) => {
          enough = resolve;
        });
        const counted = () => {
          if (finalizesAnswered >= finalizesBeforeKill && drainsAnswered > 0) enough();
        };
        const finalizer = async () => {
          while (!stopped) {
            const session = `s${next++}`;
            const { status, segments } = await recordCounted(proxy, session).catch(() => ({
              status: 0,
              segments: 0,
            }));
            if (status === 200) {
              finalized.set(session, segments);
              if (round % 2 === 1 && finalizesAnswered % 3 === 0) kept.add(session);
              finalizesAnswered += 1;
              counted();
            }
          }
        };
        const drainer = async () => {
          while (!stopped) {
            // Drain the newest: the store empties often, racing the finalizes still writing. Every
            // other round keeps every third session, so restarts also find a fuller log.
            const session = [...finalized.keys()].filter((id) => !kept.has(id)).at(-1);
            if (session === undefined) {
              await new Promise((resolve) => setTimeout(resolve, 2));
              continue;
            }
            unanswered.set(session, (unanswered.get(session) ?? 0) + 1);
            const read = await call(proxy.url, '/trajectory/read', {
              trajectory_id: session,
              drain: true,
            }).catch(() => null);
            if (read === null) continue; // no answer: stays unanswered
            unanswered.set(session, unanswered.get(session)! - 1);
            if (read.status === 200 && read.body.drained === true) {
              finalized.delete(session);
              drained.add(session);
              drainsAnswered += 1;
              counted();
            }
          }
        };
        const traffic = [finalizer(), finalizer(), finalizer(), drainer(), drainer()];
        await enoughTraffic;
        // Then a random moment on, so the kill cuts requests at different points of their writes.
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 300));
        await proxy.kill();
        stopped = true;
        await Promise.all(traffic);
      }
      const last = await startProxyProcess(engine.url, ['--store-dir', store.path]);
      try {
        await expectPromiseKept(last);
      } finally {
        await last.kill();
      }
    } finally {
      store.remove();
    }
  }, 240_000);

  it('a full disk answers 507, nothing answered 200 is lost, and the session finalizes once there is room', async (context) => {
    const disk = mountTmpfs(512 * 1024);
    // Mounting needs root (as CI has); the proxy's own tests cover a full disk with an injected file.
    if (disk === null) return context.skip();
    try {
      const storeDirectory = join(disk.path, 'store');
      // Leave the log a few kilobytes: a trajectory line of this proxy is about 2 KB.
      const filler = join(disk.path, 'filler');
      writeFileSync(filler, Buffer.alloc(512 * 1024 - 24 * 1024));
      const proxy = await startProxyProcess(engine.url, ['--store-dir', storeDirectory]);
      const stored: string[] = [];
      let refused: string | null = null;
      try {
        for (let index = 0; index < 100 && refused === null; index++) {
          const session = `full${index}`;
          const status = await record(proxy, session);
          if (status === 200) stored.push(session);
          else {
            expect(status).toBe(507);
            refused = session;
          }
        }
        expect(refused).not.toBeNull();
        expect(stored.length).toBeGreaterThan(0);
        // Space returns: the refused session is still open and now finalizes.
        await rm(filler);
        const retry = await call(proxy.url, '/session/finalize', { session_id: refused });
        expect(retry.status).toBe(200);
        stored.push(refused!);
        expect(await record(proxy, 'after')).toBe(200);
        stored.push('after');
      } finally {
        await proxy.kill();
      }
      const restarted = await startProxyProcess(engine.url, ['--store-dir', storeDirectory]);
      try {
        for (const session of stored) {
          const read = await call(restarted.url, '/trajectory/read', { trajectory_id: session });
          expectTrajectoryOf(session, read.body.data as Json[]);
        }
      } finally {
        await restarted.kill();
      }
    } finally {
      disk.unmount();
    }
  });
});
