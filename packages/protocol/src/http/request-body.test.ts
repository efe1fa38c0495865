import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DressageError } from '../errors.js';
import { HttpError, httpStatusOf } from './http-error.js';
import { sendJson } from './json-reply.js';
import { parseJsonBody, type ReadBodyOptions, readBody } from './request-body.js';

let server: Server | null = null;

afterEach(async () => {
  const open = server;
  server = null;
  if (open !== null) {
    open.closeAllConnections();
    await new Promise<void>((resolve) => open.close(() => resolve()));
  }
});

// A real loopback server that reads each body with `options` and answers its size, or the error's
// status and message.
async function serve(options: Omit<ReadBodyOptions, 'response'>): Promise<string> {
  const handle = async (request: IncomingMessage, response: ServerResponse) => {
    try {
      const bytes = await readBody(request, { ...options, response });
      sendJson(response, 200, { bytes: bytes.length, text: bytes.toString('utf8').slice(0, 20) });
    } catch (error) {
      sendJson(response, httpStatusOf(error), { message: (error as Error).message });
    }
  };
  server = createServer((request, response) => void handle(request, response));
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server!.address() as AddressInfo).port}`;
}

// Sends raw request bytes and returns what the server answered (until it closes or the timeout).
function rawExchange(url: string, head: string, chunks: string[], delayMs = 0): Promise<string> {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect(Number(port), '127.0.0.1');
    let answer = '';
    socket.on('data', (data) => {
      answer += data.toString();
    });
    socket.on('error', () => resolve(answer));
    socket.on('close', () => resolve(answer));
    socket.write(head);
    let index = 0;
    const next = () => {
      if (index >= chunks.length || socket.destroyed) return;
      socket.write(chunks[index++]!);
      setTimeout(next, delayMs);
    };
    next();
    setTimeout(() => socket.end(), 2_000).unref();
  });
}

describe('readBody', () => {
  it('reads a body within the limit', async () => {
    const url = await serve({ limit: 16 });
    const response = await fetch(url, { method: 'POST', body: '{"a":1}' });
    expect(response.status).toBe(200);
    expect(await response.json()).toEqual({ bytes: 7, text: '{"a":1}' });
  });

  it('refuses a declared content-length over the limit with a 413 naming both, and keeps serving', async () => {
    const url = await serve({ limit: 16 });
    const response = await fetch(url, { method: 'POST', body: 'x'.repeat(17) });
    expect(response.status).toBe(413);
    expect(response.headers.get('connection')).not.toBe('close');
    expect(await response.json()).toEqual({
      message: 'Request body of 17 bytes exceeds the limit of 16 bytes',
    });
  });

  it('answers a client still writing a large body over the limit, instead of resetting it', async () => {
    // 8 MiB outlasts the socket buffers: had the server closed after answering, the client's
    // write would meet a reset before it read the 413.
    const url = await serve({ limit: 1024 });
    const body = Buffer.alloc(8 * 1024 ** 2, 0x61);
    const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const sent = httpRequest(
        url,
        { method: 'POST', headers: { 'content-length': body.length } },
        (response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => {
            text += chunk.toString();
          });
          response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
        },
      );
      sent.on('error', reject);
      sent.end(body);
    });
    expect(answer.status).toBe(413);
    expect(answer.text).toContain(`Request body of ${body.length} bytes exceeds the limit of 1024 bytes`);
  });

  it('refuses a chunked body as soon as it grows past the limit, and keeps serving', async () => {
    const url = await serve({ limit: 1024 });
    const answer = await rawExchange(
      url,
      'POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n',
      [`400\r\n${'y'.repeat(1024)}\r\n`, `10\r\n${'z'.repeat(16)}\r\n`, '0\r\n\r\n'],
    );
    expect(answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(answer).toContain('Request body exceeds the limit of 1024 bytes');
    const after = await fetch(url, { method: 'POST', body: 'ok' });
    expect(after.status).toBe(200);
  });

  it('uses the server own error for a body over the limit', async () => {
    const url = await serve({
      limit: 4,
      tooLarge: (limit) => new HttpError({ status: 413, message: `over ${limit} (--max-request-mb)` }),
    });
    const response = await fetch(url, { method: 'POST', body: 'too long' });
    expect(response.status).toBe(413);
    expect(await response.json()).toEqual({ message: 'over 4 (--max-request-mb)' });
  });

  it('refuses a body that trickles past the timeout with a 408', async () => {
    const url = await serve({ limit: 1024, timeoutMs: 200 });
    const answer = await rawExchange(
      url,
      'POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n',
      ['a', 'b', 'c', 'd', 'e'],
      150,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(answer.toLowerCase()).toContain('connection: close');
    expect(answer).toContain('Request body not received within 0.2 s');
  });
});

describe('parseJsonBody', () => {
  it('parses JSON, reads a blank body as the empty value and refuses malformed JSON', () => {
    expect(parseJsonBody(Buffer.from(' {"a": [1]} '))).toEqual({ a: [1] });
    expect(parseJsonBody(Buffer.from('  \n'))).toEqual({});
    expect(parseJsonBody(Buffer.alloc(0), { empty: undefined })).toBeUndefined();
    let thrown: unknown;
    try {
      parseJsonBody(Buffer.from('{"a":'));
    } catch (error) {
      thrown = error;
    }
    expect(DressageError.isInstance(thrown)).toBe(true);
    expect(httpStatusOf(thrown)).toBe(400);
    expect((thrown as Error).message).toContain('Request body is not valid JSON');
    expect(() =>
      parseJsonBody(Buffer.from('nope'), { invalid: (error) => new Error(`mine: ${error.name}`) }),
    ).toThrow('mine: SyntaxError');
  });
});
