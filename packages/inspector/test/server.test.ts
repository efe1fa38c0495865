import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type InspectorServer, listenInspector } from '../src/server.js';
import { TokenDecoder } from '../src/session-detail.js';
import { loadStoreDirectory } from '../src/sources/store-directory.js';
import type { SessionDetail, SessionExport, SessionPage, TokenPage } from '../src/views/api-types.js';
import { type FixtureSegment, qwenTokenizer, writeFixtureStore } from './fixtures.js';

let inspector: InspectorServer;
let segments: FixtureSegment[];

beforeAll(async () => {
  const fixture = await writeFixtureStore();
  segments = fixture.segments;
  inspector = await listenInspector({
    source: loadStoreDirectory(fixture.directory),
    decoder: new TokenDecoder(await qwenTokenizer()),
    port: 0,
  });
});

afterAll(async () => {
  await inspector?.close();
});

async function get<T>(path: string): Promise<T> {
  const response = await fetch(new URL(path, inspector.url));
  expect(response.status).toBe(200);
  return (await response.json()) as T;
}

describe('inspector HTTP API', () => {
  it('pages and filters the session list', async () => {
    const all = await get<SessionPage>('api/sessions');
    expect(all.items.map((item) => item.id)).toEqual(['session-a', 'session-b']);
    const truncated = await get<SessionPage>('api/sessions?truncated=1');
    expect(truncated.items.map((item) => item.id)).toEqual(['session-b']);
    const search = await get<SessionPage>('api/sessions?search=INSTANCE-1&limit=1');
    expect(search).toMatchObject({ total: 1, limit: 1 });
  });

  it('serves a session with boundaries, version spans and messages, and its tokens page by page', async () => {
    const detail = await get<SessionDetail>('api/sessions/session-a');
    expect(detail.view).toBe('lineage');
    expect(detail.segments.map((segment) => [segment.reason, segment.reasons])).toEqual([
      ['initial', ['initial']],
      ['history_rewrite', ['history_rewrite', 'message_prefix_mismatch']],
    ]);
    expect(detail.segments[0]!.versionSpans.map((span) => span.version)).toEqual(['-1', '3', '-1', '4']);
    expect(detail.segments[0]!.messages).toHaveLength(5);
    const first = await get<TokenPage>('api/sessions/session-a/segments/0/tokens?offset=0&limit=10');
    const rest = await get<TokenPage>('api/sessions/session-a/segments/0/tokens?offset=10&limit=100000');
    const tokens = [...first.tokens, ...rest.tokens];
    expect(first.tokens).toHaveLength(10);
    expect(tokens.map((token) => token.id)).toEqual(segments[0]!.ids);
    expect(tokens.map((token) => token.mask)).toEqual(segments[0]!.mask);
    const tools = tokens.filter((token) => token.kind === 'tool').map((token) => token.position);
    expect(new Set(tools)).toEqual(segments[0]!.toolPositions);
  });

  it('exports a session as JSON and as a standalone HTML page with everything inlined', async () => {
    const exported = await get<SessionExport>('api/sessions/session-a/export.json');
    expect(exported.format).toBe('dressage-inspector/session@1');
    expect(exported.details[0]!.segments[1]!.tokens!.map((token) => token.id)).toEqual(segments[1]!.ids);
    const response = await fetch(new URL('api/sessions/session-a/export.html', inspector.url));
    expect(response.headers.get('content-disposition')).toContain('session-session-a.html');
    const html = await response.text();
    expect(html).toContain('<script id="inspector-data" type="application/json">');
    expect(html).not.toMatch(/<script[^>]+src=|<link[^>]+href=/);
    expect(html).toContain('.token-trainable');
  });

  it('answers unknown sessions with 404 and serves the bundled page', async () => {
    const missing = await fetch(new URL('api/sessions/nope', inspector.url));
    expect(missing.status).toBe(404);
    const page = await fetch(inspector.url);
    expect(await page.text()).toContain('assets/inspector.js');
    const script = await fetch(new URL('assets/inspector.js', inspector.url));
    expect(script.headers.get('content-type')).toContain('javascript');
  });

  it('answers a path of no API route with a JSON 404, a write with 405, and any other path with the page', async () => {
    const unknown = await fetch(new URL('api/nothing/here', inspector.url));
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: 'not_found', message: 'No route /api/nothing/here' });
    const write = await fetch(new URL('api/info', inspector.url), { method: 'POST' });
    expect(write.status).toBe(405);
    const deepLink = await fetch(new URL('sessions/some-session', inspector.url));
    expect(deepLink.status).toBe(200);
    expect(await deepLink.text()).toContain('assets/inspector.js');
  });
});
