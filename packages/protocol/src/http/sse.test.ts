import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { SseWriter, sseComment, sseDoneFrame, sseFrame, sseHeaders } from './sse.js';

let server: Server | null = null;

afterEach(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server === null ? resolve() : server.close(() => resolve())));
  server = null;
});

describe('server-sent events', () => {
  it('renders data, named events and comments as frames', () => {
    expect(sseFrame({ a: 1 })).toBe('data: {"a":1}\n\n');
    expect(sseFrame({ type: 'message_stop' }, 'message_stop')).toBe(
      'event: message_stop\ndata: {"type":"message_stop"}\n\n',
    );
    expect(sseComment('dressage-heartbeat')).toBe(': dressage-heartbeat\n\n');
    expect(sseDoneFrame).toBe('data: [DONE]\n\n');
  });

  it('streams frames as they are written, with the stream headers, and drops writes after the end', async () => {
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    server = createServer(async (_request, response) => {
      const stream = new SseWriter(response);
      expect(stream.started).toBe(false);
      stream.start().write(sseComment('heartbeat'));
      expect(stream.started).toBe(true);
      await released;
      stream.send({ n: 1 });
      stream.end(sseDoneFrame);
      stream.send({ n: 2 });
      stream.end();
    });
    await new Promise<void>((resolve) => server?.listen(0, '127.0.0.1', resolve));
    const response = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
    expect(response.status).toBe(200);
    expect(Object.fromEntries(response.headers)).toMatchObject(sseHeaders);
    const reader = response.body!.getReader();
    // The heartbeat arrives before the rest is written.
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toBe(': heartbeat\n\n');
    release();
    let rest = '';
    for (let part = await reader.read(); !part.done; part = await reader.read())
      rest += new TextDecoder().decode(part.value);
    expect(rest).toBe('data: {"n":1}\n\ndata: [DONE]\n\n');
  });
});
