import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './__fixtures__/harness.js';
import { minPackedLength, type PackedText, packedTextsOf } from './packed-text.js';
import { snapshotMessages } from './session.js';

// A session holds its conversation once: the messages (records need them) and the token ids in
// typed arrays. Nothing else it keeps grows with the conversation's text: no rendered snapshot text,
// no joined ids text, no copy of the previous request body.

let harness: Harness;
afterEach(async () => {
  await harness?.close();
});

// Strings and byte arrays reachable from `root` without entering the conversation's messages.
function reachable(root: unknown, messages: ReadonlySet<unknown>) {
  const seen = new Set<unknown>();
  const strings: string[] = [];
  let byteArrayBytes = 0;
  let arraySlots = 0;
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value === 'string') {
      strings.push(value);
      continue;
    }
    if (typeof value !== 'object' || value === null || seen.has(value) || messages.has(value)) continue;
    seen.add(value);
    if (ArrayBuffer.isView(value)) {
      if (value instanceof Uint8Array) byteArrayBytes += value.byteLength;
      continue;
    }
    if (value instanceof Map) pending.push(...value.keys(), ...value.values());
    else if (value instanceof Set) pending.push(...value);
    else {
      // Slots of arrays that hold messages: each is a reference to the conversation.
      if (Array.isArray(value) && value.some((item) => messages.has(item))) arraySlots += value.length;
      pending.push(...Object.values(value));
    }
  }
  return { strings, byteArrayBytes, arraySlots };
}

describe('session memory', () => {
  it('keeps no copy of the conversation text beyond its messages', async () => {
    harness = await startHarness({ tokenizer: 'qwen' });
    harness.engine.script = (_request, index) => ({ text: `Checked part ${index}.<|im_end|>` });
    const output = Array.from({ length: 40 }, (_, line) => `  ✓ case ${line} keeps its value`).join('\n');
    const messages: unknown[] = [{ role: 'system', content: 'You are a careful agent.' }];
    for (let turn = 0; turn < 20; turn++) {
      messages.push({ role: 'user', content: `Output of step ${turn}:\n${output}` });
      const response = await harness.call(
        'POST',
        '/v1/chat/completions',
        { model: 'm', messages },
        { 'x-session-id': 's' },
      );
      expect(response.status).toBe(200);
      messages.push(response.body.choices[0].message);
    }
    const session = harness.proxy.service.session('s')!;
    expect(session.steps).toHaveLength(20);
    // The conversation renders to about 27K characters; every step continued the previous one.
    expect(session.steps.at(-1)!.snapshotRenderedLength).toBeGreaterThan(20 * output.length);
    expect(new Set(session.steps.map((step) => step.lineage)).size).toBe(1);
    const conversation = new Set<unknown>([
      ...session.steps.flatMap((step) => snapshotMessages(step)),
      ...(session.requestCache?.rawMessages ?? []),
      ...(session.requestCache?.messages ?? []),
    ]);
    const { strings, byteArrayBytes, arraySlots } = reachable(session, conversation);
    // The longest string outside the messages is a reply's raw text, far below one tool output.
    expect(Math.max(...strings.map((text) => text.length))).toBeLessThan(output.length);
    // Bytes outside the token buffers: what follows the messages in the last body, nothing more.
    expect(byteArrayBytes).toBeLessThan(256);
    // References to the messages: the steps share one log; the request cache holds two arrays. Not
    // one array per step (quadratic in turns).
    expect(new Set(session.steps.map((step) => step.messageLog)).size).toBe(1);
    expect(arraySlots).toBeLessThan(4 * messages.length);
  });

  it('keeps long text outside Latin-1 once, as UTF-8, and gives it back as sent', async () => {
    harness = await startHarness({ tokenizer: 'qwen' });
    harness.engine.script = (_request, index) => ({
      text: `<think>\nRun step ${index} — after ${'the checks '.repeat(30)}✓</think>\n\nDone ${index}.<|im_end|>`,
    });
    const output = Array.from({ length: 40 }, (_, line) => `  ✓ case ${line} keeps its value`).join('\n');
    const sent: Array<Record<string, unknown>> = [
      { role: 'system', content: `You are a careful agent — ${'be brief. '.repeat(40)}` },
    ];
    for (let turn = 0; turn < 12; turn++) {
      sent.push({ role: 'user', content: `Output of step ${turn}:\n${output}` });
      const response = await harness.call(
        'POST',
        '/v1/chat/completions',
        { model: 'm', messages: sent },
        { 'x-session-id': 's' },
      );
      expect(response.status).toBe(200);
      sent.push(response.body.choices[0].message);
    }
    const session = harness.proxy.service.session('s')!;
    // One lineage, every step continuing the previous render: packed history routes like plain.
    expect(new Set(session.steps.map((step) => step.lineage)).size).toBe(1);
    expect(session.steps.map((step) => step.routeType)).toEqual(['create', ...Array(11).fill('append')]);
    expect(new Set(session.steps.map((step) => step.messageLog)).size).toBe(1);
    // Each reply is one object: the agent's copy, sent back equal, stands for the proxy's.
    const log = session.steps[11]!.messageLog;
    for (let step = 0; step < 11; step++)
      expect(session.steps[step]!.assistantMessage).toBe(log[2 * step + 2]);
    // The request cache holds the log's own objects: the next request repeats them by identity.
    expect(
      session.requestCache!.messages.every(
        (message, index) => message === session.steps[11]!.messageLog[index],
      ),
    ).toBe(true);
    // No string left that V8 keeps at two bytes a character and that is long enough to pack.
    const kept = new Set([
      ...session.steps.flatMap((step) => snapshotMessages(step)),
      ...session.requestCache!.messages,
    ]);
    const views = new Set<PackedText>();
    const walk = (value: unknown): void => {
      if (typeof value === 'string')
        expect(
          value.length < minPackedLength || Buffer.from(value, 'latin1').toString('latin1') === value,
          value.slice(0, 40),
        ).toBe(true);
      if (typeof value !== 'object' || value === null) return;
      for (const bytes of Object.values(packedTextsOf(value) ?? {})) views.add(bytes);
      for (const descriptor of Object.values(Object.getOwnPropertyDescriptors(value)))
        if ('value' in descriptor) walk(descriptor.value);
    };
    for (const message of kept) walk(message);
    // Each long text once: the system prompt, 12 tool outputs, 12 replies' reasoning.
    const longTexts = sent.flatMap((message) =>
      [message.content, message.reasoning_content].filter(
        (value): value is string => typeof value === 'string' && value.length >= minPackedLength,
      ),
    );
    expect(longTexts).toHaveLength(25);
    const utf8 = longTexts.reduce((total, value) => total + Buffer.byteLength(value), 0);
    // The proxy's reply and the agent's copy of it share their bytes.
    expect([...views].reduce((total, view) => total + view.byteLength, 0)).toBe(utf8);
    expect(session.text.textBytes).toBe(utf8);
    // Read back after finalize: each record's messages as the agent sent them.
    expect((await harness.call('POST', '/session/finalize', { session_id: 's' })).status).toBe(200);
    const read = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'timeline',
    });
    const records = read.body.data as Array<{ messages: unknown[] }>;
    expect(records).toHaveLength(12);
    for (const [index, record] of records.entries())
      expect(record.messages).toEqual(sent.slice(0, 2 * index + 3));
  });
});
