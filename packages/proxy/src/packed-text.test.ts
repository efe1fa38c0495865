import type { ChatMessage } from '@dressage/protocol';
import { firstMismatch, rendersAlike } from '@dressage/tito/internal';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { minPackedLength, packedTextsOf, packMessage, TextArena } from './packed-text.js';

// Text as agents send it: ASCII with a few characters outside Latin-1 (or none), sometimes long.
const text = fc
  .tuple(
    fc.string({ unit: 'binary', maxLength: 8 }),
    fc.constantFrom('', '✓', '✗', '—', 'é', '😀', '\ud800'),
    fc.integer({ min: 0, max: 3 * minPackedLength }),
  )
  .map(
    ([edge, mark, length]) =>
      `${edge}${'x'.repeat(length >> 1)}${mark}${'y'.repeat(length - (length >> 1))}${edge}`,
  );

// Messages as the proxy keeps them: strings in content, parts, reasoning and tool-call arguments.
const message = fc.oneof(
  fc.record({ role: fc.constantFrom('system', 'user', 'tool'), content: text }),
  fc.record({
    role: fc.constant('user'),
    content: fc.array(fc.record({ type: fc.constant('text'), text }), { maxLength: 3 }),
  }),
  fc.record(
    {
      role: fc.constant('assistant'),
      content: fc.option(text),
      reasoning_content: text,
      tool_calls: fc.array(
        fc.record({
          id: fc.string({ maxLength: 8 }),
          type: fc.constant('function'),
          function: fc.record({ name: fc.constantFrom('run', 'read'), arguments: text }),
        }),
        { maxLength: 2 },
      ),
    },
    { requiredKeys: ['role', 'content'] },
  ),
) as fc.Arbitrary<ChatMessage>;

// Every string reachable from `value` through its own data properties (what V8 keeps as strings).
function dataStrings(value: unknown, into: string[] = []): string[] {
  if (typeof value === 'string') into.push(value);
  if (typeof value !== 'object' || value === null) return into;
  for (const descriptor of Object.values(Object.getOwnPropertyDescriptors(value)))
    if ('value' in descriptor) dataStrings(descriptor.value, into);
  return into;
}

describe('packed message text', () => {
  it('reads back as the message it was, in JSON, key order and every comparison', () => {
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 6 }), (messages) => {
        const before = JSON.stringify(messages);
        const arena = new TextArena();
        const packed = messages.map((item) => packMessage(item, arena));
        expect(JSON.stringify(packed)).toBe(before);
        expect(JSON.stringify(messages)).toBe(before);
        expect(packed).toEqual(messages);
        expect(structuredClone(packed)).toEqual(messages);
        expect(packed.map((item) => ({ ...item }))).toEqual(messages);
        packed.forEach((item, index) => {
          expect(Object.keys(item)).toEqual(Object.keys(messages[index]!));
          // Content parts render alike only as the same array (the request cache hands those back).
          if (!Array.isArray(item.content)) expect(rendersAlike(item, messages[index]!)).toBe(true);
        });
        expect(firstMismatch(packed, messages)).toBe(-1);
        expect(firstMismatch(messages, packed)).toBe(-1);
        // Packing twice changes nothing and stores nothing more.
        const stored = arena.textBytes;
        for (const item of packed) expect(packMessage(item, arena)).toBe(item);
        expect(arena.textBytes).toBe(stored);
        // What is left as strings: short, Latin-1, or not well-formed. The rest is UTF-8, once.
        let packedBytes = 0;
        for (const item of packed) {
          for (const value of dataStrings(item))
            expect(
              value.length < minPackedLength ||
                Buffer.from(value, 'latin1').toString('latin1') === value ||
                /[\ud800-\udfff]/u.test(value),
            ).toBe(true);
          const walk = (value: unknown): void => {
            if (typeof value !== 'object' || value === null) return;
            for (const bytes of Object.values(packedTextsOf(value) ?? {})) packedBytes += bytes.byteLength;
            for (const member of Object.values(value)) walk(member);
          };
          walk(item);
        }
        expect(packedBytes).toBe(stored);
      }),
      { numRuns: 300 },
    );
  });

  it('returns the same object when nothing is worth packing', () => {
    const arena = new TextArena();
    const messages: ChatMessage[] = [
      { role: 'user', content: `short ✓ ${'x'.repeat(minPackedLength - 10)}` },
      { role: 'tool', tool_call_id: 'c', content: `Latin-1 only: é ${'x'.repeat(4 * minPackedLength)}` },
      { role: 'assistant', content: null },
    ];
    for (const item of messages) expect(packMessage(item, arena)).toBe(item);
    expect(arena.bytes).toBe(0);
  });

  it('holds long two-byte text at its UTF-8 size, and a written field is a plain string again', () => {
    const arena = new TextArena();
    const line = '  ✓ parses the config when the file changes (12 ms)\n';
    const content = line.repeat(400);
    const original: ChatMessage = { role: 'tool', tool_call_id: 'call-1', content };
    const packed = packMessage(original, arena) as ChatMessage & { content: string };
    expect(packed).not.toBe(original);
    expect(packed.content).toBe(content);
    // 2 bytes a character as a V8 string; as UTF-8 one byte each, and three for the ✓.
    expect(arena.textBytes).toBe(Buffer.byteLength(content));
    expect(arena.textBytes).toBeLessThan(content.length * 1.05);
    packed.content = 'edited';
    expect(packed.content).toBe('edited');
    expect(Object.getOwnPropertyDescriptor(packed, 'content')?.value).toBe('edited');
    expect(JSON.stringify(packed)).toBe('{"role":"tool","tool_call_id":"call-1","content":"edited"}');
  });

  it('fills chunks and gives long texts a buffer of their own', () => {
    const arena = new TextArena();
    const small = `${'a'.repeat(1000)}✓`;
    const views = Array.from({ length: 40 }, () => arena.store(small));
    for (const view of views) expect(view.toString()).toBe(small);
    // 40 KiB of text in 32 KiB chunks: two chunks.
    expect(arena.bytes).toBe(2 * 32 * 1024);
    const large = '✓'.repeat(20_000);
    expect(arena.store(large).toString()).toBe(large);
    expect(arena.bytes).toBe(2 * 32 * 1024 + Buffer.byteLength(large));
    expect(arena.textBytes).toBe(40 * Buffer.byteLength(small) + Buffer.byteLength(large));
  });

  it('keeps full chunks deflated and reads every text back, in any order', async () => {
    const arena = new TextArena();
    // Tool output as agents get it (compresses), and text that does not (stays raw).
    const lines = Array.from(
      { length: 60 },
      (_, index) => `  ✓ case ${index} keeps the value (${index * 7} ms)`,
    );
    const compressible = Array.from({ length: 30 }, (_, index) => lines.slice(index % 7).join('\n'));
    let seed = 7;
    const noise = () => {
      seed = (seed * 1_103_515_245 + 12_345) >>> 0;
      return seed;
    };
    const incompressible = Array.from({ length: 12 }, () =>
      String.fromCodePoint(...Array.from({ length: 1500 }, () => 0x4e00 + (noise() % 20_000))),
    );
    const texts = [...compressible, ...incompressible, `${'✓ '.repeat(9000)}`];
    const stored = texts.map((text) => arena.store(text));
    const raw = arena.bytes;
    await arena.settled();
    // The compressible chunks shrank; the last (open) chunk and the incompressible ones stay raw.
    expect(arena.bytes).toBeLessThan(raw * 0.75);
    expect(arena.textBytes).toBe(texts.reduce((total, text) => total + Buffer.byteLength(text), 0));
    // Read back in order, backwards and interleaved across chunks.
    const order = [...texts.keys()];
    for (const index of [...order, ...order.reverse(), ...order.map((_, i) => (i * 17) % texts.length)])
      expect(stored[index]!.toString()).toBe(texts[index]);
    // A packed message reads back through a deflated chunk as the text it was.
    const message = packMessage({ role: 'tool', tool_call_id: 'c', content: compressible[0]! }, arena);
    for (const text of compressible) arena.store(text);
    await arena.settled();
    expect(message.content).toBe(compressible[0]);
  });
});
