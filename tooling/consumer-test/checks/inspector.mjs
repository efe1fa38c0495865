// @dressage/inspector from its tarball: serve an exported-segments file, page the session list,
// decode a segment's tokens with the bundled Qwen3 tokenizer, and load the shipped front end.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startInspector } from '@dressage/inspector';
import { classifyTokens } from '@dressage/inspector/internal';

// The page's helpers are a subpath of their own: a trainable token is classed as one.
assert.equal(classifyTokens(['Hello', ' world'], [0, 1])[1], 'trainable');

const folder = mkdtempSync(join(tmpdir(), 'inspector-consumer-'));
const file = join(folder, 'segments.jsonl');
// "Hello world" is [9707, 1879] in Qwen3; the second token is trainable.
const segment = (id, index) => ({
  uid: `${id}-${index}`,
  session_id: id,
  trajectory_id: id,
  instance_id: 'instance-1',
  segment_index: index,
  segment_count: 1,
  messages: [{ role: 'user', content: 'Hello' }],
  tools: null,
  tokens: [9707, 1879],
  full_loss_mask: [0, 1],
  full_logprobs: [0, -0.25],
  full_versions: ['-1', '7'],
  aligned_response_length: 1,
  finish_reason: 'stop',
  timestamp: 0,
  extra_info: { segment_view: 'lineage', segment_reason: 'initial', segment_reasons: ['initial'] },
});
writeFileSync(
  file,
  `${['a', 'b', 'c'].map((id) => JSON.stringify(segment(`session-${id}`, 0))).join('\n')}\n`,
);

const inspector = await startInspector({ file, port: 0 });
try {
  const page = await (await fetch(new URL('api/sessions?limit=2&offset=1', inspector.url))).json();
  assert.equal(page.total, 3);
  assert.deepEqual(
    page.items.map((item) => item.id),
    ['session-b', 'session-c'],
  );
  const tokens = await (
    await fetch(new URL('api/sessions/session-a/segments/0/tokens', inspector.url))
  ).json();
  assert.deepEqual(
    tokens.tokens.map((token) => [token.text, token.kind, token.logprob, token.version]),
    [
      ['Hello', 'context', 0, '-1'],
      [' world', 'trainable', -0.25, '7'],
    ],
  );
  const html = await (await fetch(inspector.url)).text();
  const script = await fetch(new URL('assets/inspector.js', inspector.url));
  assert.match(html, /assets\/inspector\.js/);
  assert.equal(script.status, 200);
  console.log(`served ${page.total} sessions and decoded ${tokens.total} tokens at ${inspector.url}`);
} finally {
  await inspector.close();
  rmSync(folder, { recursive: true, force: true });
}
