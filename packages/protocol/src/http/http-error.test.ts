import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { DressageError } from '../errors.js';
import { codeOfHttpStatus, HttpError, httpStatusOf } from './http-error.js';
import { sendJson, sendJsonText } from './json-reply.js';

describe('error statuses', () => {
  it('maps a DressageError by its code, an HttpError by its exact status, anything else to 500', () => {
    expect(httpStatusOf(new DressageError({ code: 'not_found', message: 'x' }))).toBe(404);
    expect(httpStatusOf(new DressageError({ code: 'resource_exhausted', message: 'x' }))).toBe(429);
    expect(httpStatusOf(new DressageError({ code: 'unauthenticated', message: 'x' }))).toBe(401);
    expect(httpStatusOf(new HttpError({ status: 413, message: 'too large' }))).toBe(413);
    expect(httpStatusOf(new Error('boom'))).toBe(500);
    expect(httpStatusOf('boom')).toBe(500);
  });

  it('gives an HttpError the code its status stands for unless told', () => {
    const tooLarge = new HttpError({ status: 413, message: 'too large', details: { limit_bytes: 4 } });
    expect(tooLarge).toBeInstanceOf(DressageError);
    expect(tooLarge.code).toBe('resource_exhausted');
    expect(tooLarge.details).toEqual({ limit_bytes: 4 });
    expect(new HttpError({ status: 409, message: 'x', code: 'already_exists' }).code).toBe('already_exists');
    expect(codeOfHttpStatus(404)).toBe('not_found');
    // The gRPC canonical mapping: a conflict is `aborted`, a bad gateway `unavailable`.
    expect(codeOfHttpStatus(409)).toBe('aborted');
    expect(codeOfHttpStatus(502)).toBe('unavailable');
    expect(codeOfHttpStatus(418)).toBe('invalid_argument');
    expect(codeOfHttpStatus(599)).toBe('internal');
  });
});

describe('JSON replies', () => {
  it('answers JSON with its length, an empty body for undefined, and extra headers', async () => {
    const server = createServer((request, response) => {
      if (request.url === '/empty') sendJson(response, 200, undefined);
      else if (request.url === '/text') sendJsonText(response, 201, '{"pre":"written"}');
      else sendJson(response, 404, { error: 'not_found' }, { 'cache-control': 'no-store' });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const missing = await fetch(`${url}/x`);
      expect(missing.status).toBe(404);
      expect(missing.headers.get('content-type')).toBe('application/json');
      expect(missing.headers.get('cache-control')).toBe('no-store');
      expect(missing.headers.get('content-length')).toBe('21');
      expect(await missing.json()).toEqual({ error: 'not_found' });
      const empty = await fetch(`${url}/empty`);
      expect(empty.headers.get('content-length')).toBe('0');
      expect(await empty.text()).toBe('');
      const text = await fetch(`${url}/text`);
      expect(text.status).toBe(201);
      expect(await text.json()).toEqual({ pre: 'written' });
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});
