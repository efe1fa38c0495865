import { Agent, request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './__fixtures__/harness.js';

let harness: Harness;
afterEach(async () => {
  // The engine first: a call still hanging in it (a failed assertion) would hold the proxy's close.
  await harness?.engine.close();
  await harness?.proxy.close();
});

const body = (session: string) => JSON.stringify({ messages: [{ role: 'user', content: `hi ${session}` }] });

// One chat call on `agent`'s keep-alive connection; `destroyWhen` resolving drops the connection.
function chatOn(agent: Agent, session: string, destroyWhen?: Promise<void>) {
  return new Promise<{ status: number; text: string } | 'dropped'>((resolve, reject) => {
    const call = request(
      `${harness.url}/v1/chat/completions`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'x-session-id': session } },
      (response) => {
        let text = '';
        response.on('data', (chunk: Buffer) => {
          text += chunk.toString();
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
      },
    );
    call.on('error', (error) => (destroyWhen ? resolve('dropped') : reject(error)));
    call.end(body(session));
    destroyWhen?.then(() => call.destroy());
  });
}

describe('client disconnects', () => {
  it('a dropped connection aborts its engine request; calls before it and on other connections are untouched', async () => {
    harness = await startHarness();
    harness.engine.script = (seen) =>
      seen.body.input_ids.length > 0 && seen.body.rid.includes('-hang-') ? { hang: true } : { text: 'ok' };
    const kept = new Agent({ keepAlive: true, maxSockets: 1 });
    const other = new Agent({ keepAlive: true, maxSockets: 1 });
    // Two calls complete on one keep-alive connection: the connection's abort is not fired by them.
    expect((await chatOn(kept, 'first')) as { status: number }).toMatchObject({ status: 200 });
    expect((await chatOn(kept, 'second')) as { status: number }).toMatchObject({ status: 200 });
    // The third hangs in the engine until its client goes away.
    const dropped = chatOn(kept, 'hang', harness.engine.waitForRunning(1));
    expect(await dropped).toBe('dropped');
    const started = Date.now();
    while (harness.engine.runningIds.length > 0 && Date.now() - started < 5000) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(harness.engine.runningIds).toEqual([]);
    // The proxy keeps serving, on a new connection and in the session that was dropped.
    expect((await chatOn(other, 'fourth')) as { status: number }).toMatchObject({ status: 200 });
    harness.engine.script = () => ({ text: 'ok' });
    const again = await chatOn(other, 'hang');
    expect(again).toMatchObject({ status: 200 });
    kept.destroy();
    other.destroy();
  }, 20_000);
});
