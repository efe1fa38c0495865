import { chatCompletionRequestSchema } from '@dressage/protocol';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { decodeCharacters } from './__fixtures__/fake-tokenizer.js';
import { type Harness, startHarness } from './__fixtures__/harness.js';

// The per-session caches (validated message prefix, rendered-snapshot digests) must never change what
// a request routes to, how it segments or how it fails.
let harness: Harness;
afterEach(async () => {
  await harness?.close();
});

const user = (content: unknown) => ({ role: 'user', content });
const assistant = (content: string) => ({ role: 'assistant', content });
const tool = (name: string) => ({ type: 'function', function: { name, parameters: { type: 'object' } } });

async function chat(session: string, messages: unknown[], extra: Record<string, unknown> = {}) {
  return harness.call(
    'POST',
    '/v1/chat/completions',
    { model: 'm', messages, ...extra },
    { 'x-session-id': session },
  );
}

async function timeline(session: string) {
  expect((await harness.call('POST', '/session/finalize', { session_id: session })).status).toBe(200);
  const read = await harness.call('POST', '/trajectory/read', {
    trajectory_id: session,
    segment_view: 'timeline',
  });
  return read.body.data as Array<{
    messages: Array<{ content: unknown }>;
    tools: unknown;
    extra_info: Record<string, unknown>;
  }>;
}

describe('request caches', () => {
  it('a rewritten early message after cached turns is a history rewrite and is recorded as sent', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: `r${index}` });
    expect((await chat('s', [user('one')])).status).toBe(200);
    expect((await chat('s', [user('one'), assistant('r0'), user('two')])).status).toBe(200);
    const rewritten = [user('ONE'), assistant('r0'), user('two'), assistant('r1'), user('three')];
    expect((await chat('s', rewritten)).status).toBe(200);
    const records = await timeline('s');
    expect(records.map((record) => record.extra_info.route_type)).toEqual(['create', 'append', 'create']);
    expect(records[2]!.extra_info.segment_reasons).toEqual(['history_rewrite']);
    expect(records[2]!.messages[0]!.content).toBe('ONE');
    expect(decodeCharacters(harness.engine.requests[2]!.body.input_ids)).toBe(
      '<user>ONE<assistant>r0<user>two<assistant>r1<user>three<assistant>',
    );
  });

  it('invalid messages after cached turns fail exactly as on a fresh session', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ text: 'ok' });
    expect((await chat('s', [user('one')])).status).toBe(200);
    expect((await chat('s', [user('one'), assistant('ok'), user('two')])).status).toBe(200);
    const bodies = [
      // A cached position changed to something invalid.
      [user(5), assistant('ok'), user('two'), assistant('ok'), user('three')],
      // A valid cached prefix and an invalid tail.
      [user('one'), assistant('ok'), user('two'), assistant('ok'), { role: 'robot', content: 'x' }],
      [user('one'), assistant('ok'), user('two'), assistant('ok'), user({ text: 'not a list' })],
    ];
    for (const messages of bodies) {
      const cached = await chat('s', messages);
      const fresh = await chat(`fresh-${bodies.indexOf(messages)}`, messages);
      expect(cached.status).toBe(400);
      expect(cached.body).toEqual(fresh.body);
    }
    // The failures recorded nothing and the session goes on from its cached state.
    expect(
      (await chat('s', [user('one'), assistant('ok'), user('two'), assistant('ok'), user('3')])).status,
    ).toBe(200);
    expect((await timeline('s')).map((record) => record.extra_info.route_type)).toEqual([
      'create',
      'append',
      'append',
    ]);
  });

  it('a body that repeats the previous one is parsed only from where it grows', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: `r${index}` });
    const tools = { tools: [tool('read')], stream: false };
    expect((await chat('s', [user('one')], tools)).status).toBe(200);
    expect((await chat('s', [user('one'), assistant('r0'), user('two')], tools)).status).toBe(200);
    const third = JSON.stringify({
      model: 'm',
      messages: [user('one'), assistant('r0'), user('two'), assistant('r1'), user('three')],
      ...tools,
    });
    const parse = vi.spyOn(JSON, 'parse');
    try {
      expect(
        (await harness.call('POST', '/v1/chat/completions', third, { 'x-session-id': 's' })).status,
      ).toBe(200);
      const proxySide = parse.mock.calls
        .map(([text]) => String(text))
        .filter((text) => !text.includes('"choices"'));
      // The new messages were parsed; the whole body and the repeated history were not.
      expect(proxySide.some((text) => text.includes('three') && !text.includes('one'))).toBe(true);
      expect(proxySide.some((text) => text.includes('"one"'))).toBe(false);
    } finally {
      parse.mockRestore();
    }
    const records = await timeline('s');
    expect(records.map((record) => record.extra_info.route_type)).toEqual(['create', 'append', 'append']);
    expect(records[2]!.messages.map((message) => message.content)).toEqual([
      'one',
      'r0',
      'two',
      'r1',
      'three',
      'r2',
    ]);
    expect(records[2]!.tools).toEqual(tools.tools);
  });

  it('a malformed or odd body after cached turns is answered as a fresh session answers it', async () => {
    harness = await startHarness();
    harness.engine.script = () => ({ text: 'ok' });
    const head = '{"model":"m","messages":[{"role":"user","content":"one"}';
    expect(
      (await harness.call('POST', '/v1/chat/completions', `${head}]}`, { 'x-session-id': 's' })).status,
    ).toBe(200);
    const bodies = [
      `${head},{"role":"assistant","content":"ok"},{"role":"user","content":"two"}`,
      `${head},{"role":"assistant","content":"ok"},{"role":"user","content":"two"]]}`,
      `${head},{"role":"assistant","content":"ok"}],"stream":tru}`,
      // JSON.parse keeps the later `messages`: an empty list, which is invalid.
      `${head},{"role":"assistant","content":"ok"},{"role":"user","content":"two"}],"messages":[]}`,
    ];
    for (const [index, body] of bodies.entries()) {
      const cached = await harness.call('POST', '/v1/chat/completions', body, { 'x-session-id': 's' });
      const fresh = await harness.call('POST', '/v1/chat/completions', body, {
        'x-session-id': `fresh-${index}`,
      });
      expect(cached.status).toBe(400);
      expect(cached.body).toEqual(fresh.body);
    }
  });

  it('parses every body of random sessions as a whole parse would', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: index % 3 === 0 ? `r${index}` : `"q${index}"\\` });
    const parse = vi.spyOn(harness.proxy.service, 'runChatCompletion');
    let state = 7;
    const random = () => {
      state = (state * 1103515245 + 12345) % 2147483648;
      return state / 2147483648;
    };
    const toolLists = [undefined, [tool('read')], [tool('read'), tool('write')]];
    let checked = 0;
    for (let session = 0; session < 6; session++) {
      const messages: unknown[] = [user(`start ${session} "quoted" ]}`)];
      let tools = toolLists[session % 3];
      for (let turn = 0; turn < 8; turn++) {
        if (random() < 0.25) tools = toolLists[Math.floor(random() * 3)];
        const extra: Record<string, unknown> = {};
        if (random() < 0.3) extra.temperature = Math.round(random() * 10) / 10;
        if (random() < 0.3) extra.stream = false;
        const ahead = random() < 0.3;
        // Tools ahead of the messages or after them; sometimes an early message rewritten.
        const sent = random() < 0.1 ? [user('rewritten'), ...messages.slice(1)] : messages;
        const body = ahead
          ? { tools, model: 'm', messages: sent, ...extra }
          : { model: 'm', messages: sent, ...extra, ...(tools === undefined ? {} : { tools }) };
        const text = JSON.stringify(body);
        const answer = await harness.call('POST', '/v1/chat/completions', text, {
          'x-session-id': `r${session}`,
        });
        expect(answer.status).toBe(200);
        const parsed = parse.mock.calls.at(-1)![0];
        // Sent as bytes: the next body is compared with these, so the parsed messages are not kept.
        expect(parsed.rawMessages).toBeNull();
        expect(parsed.rawTools).toEqual(JSON.parse(text).tools);
        expect(parsed.body).toEqual(chatCompletionRequestSchema.parse(JSON.parse(text)));
        checked++;
        messages.push(answer.body.choices[0].message, user(`turn ${turn} \\ "${session}"`));
      }
    }
    expect(checked).toBe(48);
    parse.mockRestore();
  });

  it('tools dropped after cached turns are a tools change, and tools before the messages count too', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: `r${index}` });
    const offered = { tools: [tool('read')] };
    expect((await chat('s', [user('a')], offered)).status).toBe(200);
    expect((await chat('s', [user('a'), assistant('r0'), user('b')])).status).toBe(200);
    // Tools ahead of the messages: repeated bytes, then changed ones.
    const ahead = (tools: unknown, messages: unknown[]) =>
      harness.call('POST', '/v1/chat/completions', JSON.stringify({ tools, model: 'm', messages }), {
        'x-session-id': 't',
      });
    expect((await ahead([tool('read')], [user('a')])).status).toBe(200);
    expect((await ahead([tool('read')], [user('a'), assistant('r2'), user('b')])).status).toBe(200);
    expect(
      (await ahead([tool('write')], [user('a'), assistant('r2'), user('b'), assistant('r3'), user('c')]))
        .status,
    ).toBe(200);
    const dropped = await timeline('s');
    expect(dropped.map((record) => record.tools)).toEqual([offered.tools, null]);
    expect(dropped[1]!.extra_info.segment_reasons).toEqual(['tools_changed']);
    const sentAhead = await timeline('t');
    expect(sentAhead.map((record) => record.tools)).toEqual([
      [tool('read')],
      [tool('read')],
      [tool('write')],
    ]);
    expect(sentAhead.map((record) => record.extra_info.segment_reasons)).toEqual([
      ['initial'],
      ['initial'],
      ['tools_changed'],
    ]);
  });

  it('a tools change after cached turns still starts a segment with the new tools', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: `r${index}` });
    const first = { tools: [tool('read')] };
    expect((await chat('s', [user('a')], first)).status).toBe(200);
    expect((await chat('s', [user('a'), assistant('r0'), user('b')], first)).status).toBe(200);
    const second = { tools: [tool('read'), tool('write')] };
    const messages = [user('a'), assistant('r0'), user('b'), assistant('r1'), user('c')];
    expect((await chat('s', messages, second)).status).toBe(200);
    const records = await timeline('s');
    expect(records[1]!.extra_info.segment_reasons).toEqual(['initial']);
    expect(records[2]!.extra_info.segment_reasons).toEqual(['tools_changed']);
    expect(records[2]!.extra_info.route_type).toBe('append');
    expect(records[2]!.tools).toEqual(second.tools);
    const lineage = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'lineage',
    });
    expect(lineage.body.data).toHaveLength(2);
    expect(lineage.body.data[1].extra_info.segment_reasons).toEqual(['tools_changed']);
  });

  it('routes to steps whose snapshot text was dropped (more lineages than hot sources)', async () => {
    harness = await startHarness();
    harness.engine.script = (_request, index) => ({ text: `r${index}` });
    // Six unrelated openings: six lineages, more than the hot sources a session keeps.
    for (let index = 0; index < 6; index++) expect((await chat('s', [user(`x${index}`)])).status).toBe(200);
    expect((await chat('s', [user('x0'), assistant('r0'), user('more')])).status).toBe(200);
    expect((await chat('s', [user('x0'), assistant('r0'), user('other')])).status).toBe(200);
    expect((await chat('s', [user('x4'), assistant('r4'), user('late')])).status).toBe(200);
    expect(decodeCharacters(harness.engine.requests[6]!.body.input_ids)).toBe(
      '<user>x0<assistant>r0<user>more<assistant>',
    );
    const records = await timeline('s');
    const routes = records.map((record) => [
      record.extra_info.route_type,
      record.extra_info.route_base_step_id,
      record.extra_info.lineage_id,
    ]);
    expect(routes.slice(6)).toEqual([
      ['append', 'step-000001', 'lineage-000001'],
      ['branch', 'step-000001', 'lineage-000007'],
      ['append', 'step-000005', 'lineage-000005'],
    ]);
  });
});
