// The inspector serves training data to a browser: a page from another origin must not read it by
// rebinding its domain to 127.0.0.1, and a malformed path is the caller's error.
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type InspectorServer, listenInspector } from '../src/server.js';
import { TokenDecoder } from '../src/session-detail.js';
import { loadStoreDirectory } from '../src/sources/store-directory.js';
import { qwenTokenizer, writeFixtureStore } from './fixtures.js';

let inspector: InspectorServer;
let allowing: InspectorServer;

beforeAll(async () => {
  const fixture = await writeFixtureStore();
  const options = {
    source: loadStoreDirectory(fixture.directory),
    decoder: new TokenDecoder(await qwenTokenizer()),
    port: 0,
  };
  inspector = await listenInspector(options);
  allowing = await listenInspector({ ...options, allowedHosts: ['inspector.internal'] });
});

afterAll(async () => {
  await inspector?.close();
  await allowing?.close();
});

// fetch() will not send a chosen Host header; a raw request does, as a rebinding browser would.
function get(server: InspectorServer, path: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const sent = request({ host: '127.0.0.1', port: server.port, path, headers: { host } }, (response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => {
        body += chunk.toString();
      });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    sent.on('error', reject);
    sent.end();
  });
}

describe('inspector Host guard', () => {
  it('answers loopback names', async () => {
    for (const host of [
      `127.0.0.1:${inspector.port}`,
      `localhost:${inspector.port}`,
      `[::1]:${inspector.port}`,
    ]) {
      expect((await get(inspector, '/api/sessions', host)).status, host).toBe(200);
    }
  });

  it('refuses any other Host, the way a rebound domain arrives', async () => {
    for (const host of [
      `evil.example:${inspector.port}`,
      'evil.example',
      '192.0.2.7',
      'localhost.evil.example',
    ]) {
      const response = await get(inspector, '/api/sessions', host);
      expect(response.status, host).toBe(403);
      expect(response.body, host).toContain('forbidden_host');
      expect(response.body, host).not.toContain('session-a');
    }
    expect((await get(inspector, '/', 'evil.example')).status).toBe(403);
  });

  it('accepts the names it is configured with', async () => {
    expect((await get(allowing, '/api/sessions', `inspector.internal:${allowing.port}`)).status).toBe(200);
    expect((await get(allowing, '/api/sessions', 'other.internal')).status).toBe(403);
  });

  it('answers malformed %-encoding with 400 and keeps serving', async () => {
    const host = `127.0.0.1:${inspector.port}`;
    for (const path of ['/api/sessions/%E0%A4%A', '/api/sessions/%', '/%ZZ']) {
      const response = await get(inspector, path, host);
      expect(response.status, path).toBe(400);
      expect(JSON.parse(response.body).error, path).toBe('invalid_argument');
    }
    expect((await get(inspector, '/api/sessions', host)).status).toBe(200);
  });
});
