import { describe, expect, it } from 'vitest';
import { continueBody, layoutOf, parseJson } from './request-bytes.js';

// A small deterministic generator (mulberry32), so failures reproduce.
function createRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let value = state;
    value = Math.imul(value ^ (value >>> 15), value | 1);
    value ^= value + Math.imul(value ^ (value >>> 7), value | 61);
    return ((value ^ (value >>> 14)) >>> 0) / 4294967296;
  };
}

// Text that stresses the scanner: quotes, backslashes before quotes, brackets and braces inside
// strings, multi-byte characters and surrogate pairs.
const pieces = ['plain', '"quoted"', 'back\\slash', '\\"', '\\\\', ']}', '{[', 'ünï', '😀', '\n', ',', ':'];
function text(random: () => number): string {
  let out = '';
  const count = Math.floor(random() * 6);
  for (let index = 0; index < count; index++) out += pieces[Math.floor(random() * pieces.length)];
  return out;
}

function message(random: () => number, index: number): Record<string, unknown> {
  if (index % 2 === 1) {
    const reply: Record<string, unknown> = { role: 'assistant', content: text(random) };
    if (random() < 0.3) {
      reply.tool_calls = [
        {
          id: `call_${index}`,
          type: 'function',
          function: { name: 'ls', arguments: `{"path": "${index}"}` },
        },
      ];
    }
    return reply;
  }
  if (random() < 0.2) return { role: 'user', content: [{ type: 'text', text: text(random) }] };
  return { role: 'user', content: text(random), name: random() < 0.2 ? 'agent' : undefined };
}

// One body in one of several shapes: keys before and after `messages`, pretty-printed or compact.
function serialize(messages: unknown[], shape: number, newline: boolean): Buffer {
  const tools = [{ type: 'function', function: { name: 'ls', parameters: { type: 'object' } } }];
  const body =
    shape === 0
      ? { model: 'm', messages, tools, stream: false }
      : shape === 1
        ? { tools, messages, temperature: 0.5 }
        : { messages };
  const indent = shape === 1 ? 2 : undefined;
  return Buffer.from(JSON.stringify(body, null, indent) + (newline ? '\n' : ''));
}

function assemble(previous: unknown[], continued: NonNullable<ReturnType<typeof continueBody>>) {
  return {
    ...continued.layout.before,
    messages: [...previous.slice(0, continued.repeated), ...continued.appended],
    ...continued.layout.after,
  };
}

describe('request bodies as bytes', () => {
  it('parses appended conversations exactly as JSON.parse does, without the repeated messages', () => {
    let continuedCount = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const random = createRandom(seed);
      const shape = seed % 3;
      const newline = seed % 2 === 0;
      const messages: unknown[] = [{ role: 'system', content: text(random) }, message(random, 0)];
      let bytes = serialize(messages, shape, newline);
      let layout = layoutOf(bytes);
      expect(layout).not.toBeNull();
      expect(layout!.messageEnds).toHaveLength(messages.length);
      let parsed = JSON.parse(bytes.toString('utf8')).messages as unknown[];
      for (let turn = 1; turn < 8; turn++) {
        // An assistant reply and a new user message; sometimes nothing new at all (a retry).
        if (random() < 0.85) messages.push(message(random, 2 * turn - 1), message(random, 2 * turn));
        const next = serialize(messages, shape, newline);
        const expected = JSON.parse(next.toString('utf8'));
        const continued = continueBody(layout!, next);
        expect(continued).not.toBeNull();
        expect(continued!.repeated).toBe(layout!.messageEnds.length);
        expect(assemble(parsed, continued!)).toEqual(expected);
        // The bytes after the messages are the same body after body, so they are not parsed again.
        expect(continued!.sameAfter).toBe(true);
        expect(continued!.layout.messageEnds).toEqual(layoutOf(next)!.messageEnds);
        continuedCount++;
        bytes = next;
        layout = continued!.layout;
        parsed = expected.messages;
      }
      expect(layout!.bytes).toBe(bytes);
    }
    expect(continuedCount).toBe(1400);
  });

  it('parses changed members after the messages again', () => {
    const first = Buffer.from('{"model":"m","messages":[{"role":"user","content":"a"}],"stream":false}');
    const next = Buffer.from(
      '{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}],"stream":true,"n":2}',
    );
    const continued = continueBody(layoutOf(first)!, next)!;
    expect(continued.sameAfter).toBe(false);
    expect(continued.layout.after).toEqual({ stream: true, n: 2 });
    expect(assemble([{ role: 'user', content: 'a' }], continued)).toEqual(JSON.parse(next.toString()));
  });

  it('gives up on anything but an exact continuation, leaving the body to a whole parse', () => {
    const first = Buffer.from(
      '{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}',
    );
    const layout = layoutOf(first)!;
    const head = '{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}';
    const refused = [
      // history rewritten, model changed, fewer messages
      '{"model":"m","messages":[{"role":"user","content":"A"},{"role":"user","content":"b"}]}',
      '{"model":"x","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}',
      '{"model":"m","messages":[{"role":"user","content":"a"}]}',
      // malformed after the repeated part
      `${head},{"role":"user","content":"c"}`,
      `${head},{"role":"user","content":"c"]]}`,
      `${head},{"role":"user","content":"c}]}`,
      `${head},]}`,
      `${head}]}garbage`,
      `${head},"not an object"]}`,
      // `messages` again after the array: JSON.parse takes the later one
      `${head}],"messages":[]}`,
      `${head}],"messag\\u0065s":[]}`,
    ];
    for (const body of refused) expect(continueBody(layout, Buffer.from(body))).toBeNull();
    // The same bodies, whole: JSON.parse rejects the malformed ones, and the rest are parsed normally.
    expect(() => parseJson(Buffer.from(refused[4]!))).toThrow(/Malformed JSON body/);
  });

  it('finds no layout where there is no plain messages array of objects', () => {
    for (const body of [
      '[]',
      '{"model":"m"}',
      '{"messages":"text"}',
      '{"messages":[1,2]}',
      '{"messag\\u0065s":[{"role":"user","content":"a"}]}',
      '{"messages":[{"role":"user","content":"a"}],"messages":[]}',
    ])
      expect(layoutOf(Buffer.from(body))).toBeNull();
    const spaced = Buffer.from(
      ' { "a" : [ 1 , {"b":"]"} ] ,\n "messages" : [ {"role":"user"} , {"role":"tool"} ] , "z" : null } ',
    );
    const layout = layoutOf(spaced)!;
    expect(layout.before).toEqual({ a: [1, { b: ']' }] });
    expect(layout.after).toEqual({ z: null });
    expect(layout.messageEnds.map((end) => spaced.toString('utf8', end - 1, end))).toEqual(['}', '}']);
  });
});
