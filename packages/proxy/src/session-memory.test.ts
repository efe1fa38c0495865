import { afterEach, describe, expect, it } from 'vitest';
import { type Harness, startHarness } from './__fixtures__/harness.js';
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
});
