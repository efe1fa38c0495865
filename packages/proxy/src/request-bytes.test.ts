import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { continueBody, keptMessageBytes, layoutOf, parseJson } from './request-bytes.js';

// Text that stresses the scanner: quotes, backslashes before quotes, brackets and braces inside
// strings, multi-byte characters and surrogate pairs.
const text = fc
  .array(
    fc.constantFrom(
      'plain',
      '"quoted"',
      'back\\slash',
      '\\"',
      '\\\\',
      ']}',
      '{[',
      'ünï',
      '😀',
      '\n',
      ',',
      ':',
    ),
    {
      maxLength: 5,
    },
  )
  .map((pieces) => pieces.join(''));

const userMessage = fc.oneof(
  text.map((content) => ({ role: 'user', content })),
  fc.record({ role: fc.constant('user'), content: text, name: fc.constant('agent') }),
  text.map((part) => ({ role: 'user', content: [{ type: 'text', text: part }] })),
);
const assistantMessage = fc.oneof(
  text.map((content) => ({ role: 'assistant', content })),
  fc.tuple(text, fc.nat(99)).map(([content, index]) => ({
    role: 'assistant',
    content,
    tool_calls: [
      { id: `call_${index}`, type: 'function', function: { name: 'ls', arguments: `{"path": "${index}"}` } },
    ],
  })),
);
// Turns of a session: an assistant reply and a user message, or nothing new (a retry).
const turns = fc.array(fc.option(fc.tuple(assistantMessage, userMessage), { freq: 6 }), {
  minLength: 1,
  maxLength: 7,
});

// One body in one of several shapes: keys before and after `messages`, pretty-printed or compact.
function serialize(messages: unknown[], shape: number, newline: boolean): Buffer {
  const tools = [{ type: 'function', function: { name: 'ls', parameters: { type: 'object' } } }];
  const body =
    shape === 0
      ? { model: 'm', messages, tools, stream: false }
      : shape === 1
        ? { tools, messages, temperature: 0.5 }
        : { messages };
  return Buffer.from(JSON.stringify(body, null, shape === 1 ? 2 : undefined) + (newline ? '\n' : ''));
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
    fc.assert(
      fc.property(
        text,
        userMessage,
        turns,
        fc.nat(2),
        fc.boolean(),
        (system, first, session, shape, newline) => {
          const messages: unknown[] = [{ role: 'system', content: system }, first];
          let bytes = serialize(messages, shape, newline);
          let layout = layoutOf(bytes);
          expect(layout).not.toBeNull();
          expect(layout!.messageCount).toBe(messages.length);
          let parsed = JSON.parse(bytes.toString('utf8')).messages as unknown[];
          for (const turn of session) {
            if (turn !== null) messages.push(...turn);
            const next = serialize(messages, shape, newline);
            const expected = JSON.parse(next.toString('utf8'));
            const continued = continueBody(layout!, next);
            expect(continued).not.toBeNull();
            expect(continued!.repeated).toBe(layout!.messageCount);
            expect(assemble(parsed, continued!)).toEqual(expected);
            // The bytes after the messages are the same body after body, so they are not parsed again.
            expect(continued!.sameAfter).toBe(true);
            // The kept state is what a whole scan of the body gives.
            expect(continued!.layout).toEqual(layoutOf(next));
            bytes = next;
            layout = continued!.layout;
            parsed = expected.messages;
          }
          // Nothing of the body is kept but what follows its messages.
          expect(layout!.tail.length).toBeLessThan(200);
          expect(layout!.tail.length).toBeLessThan(bytes.length - layout!.messagesEnd + 1);
        },
      ),
      { numRuns: 300 },
    );
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

  it('refuses a body whose earlier message changed anywhere, even keeping every length', () => {
    const messages = Array.from({ length: 40 }, (_, index) => ({
      role: 'user',
      content: `message ${index} ✓`,
    }));
    const layout = layoutOf(Buffer.from(JSON.stringify({ messages })))!;
    for (const changed of [0, 17, 39]) {
      const next = messages.map((message, index) =>
        index === changed ? { ...message, content: message.content.replace('message', 'Message') } : message,
      );
      next.push({ role: 'user', content: 'new' });
      expect(continueBody(layout, Buffer.from(JSON.stringify({ messages: next })))).toBeNull();
    }
    const appended = [...messages, { role: 'user', content: 'new' }];
    expect(continueBody(layout, Buffer.from(JSON.stringify({ messages: appended })))!.appended).toEqual([
      { role: 'user', content: 'new' },
    ]);
  });

  it('refuses a message changed by one non-ASCII character, short bodies and long ones alike', () => {
    // `✓` and `✗` are three UTF-8 bytes each and differ only in the last one.
    for (const padding of [0, 2 * keptMessageBytes]) {
      const messages = [
        { role: 'system', content: `Run the tests.${' '.repeat(padding)}` },
        { role: 'user', content: 'case 1 ✓, case 2 ✓' },
        { role: 'assistant', content: 'Both pass.' },
      ];
      const bytes = Buffer.from(JSON.stringify({ model: 'm', messages }));
      const layout = layoutOf(bytes)!;
      // Short message bytes are kept as they are, long ones as their digest.
      expect(layout.messages === null).toBe(padding > 0);
      expect(layout.messagesDigest === null).toBe(padding === 0);
      const next = { role: 'user', content: 'Now case 3.' };
      const changed = messages.map((message, index) =>
        index === 1 ? { ...message, content: 'case 1 ✓, case 2 ✗' } : message,
      );
      const changedBytes = Buffer.from(JSON.stringify({ model: 'm', messages: [...changed, next] }));
      expect(changedBytes.length).toBe(bytes.length + Buffer.byteLength(`,${JSON.stringify(next)}`));
      expect(continueBody(layout, changedBytes)).toBeNull();
      const continued = continueBody(
        layout,
        Buffer.from(JSON.stringify({ model: 'm', messages: [...messages, next] })),
      )!;
      expect(continued.repeated).toBe(3);
      expect(continued.appended).toEqual([next]);
    }
  });

  it('keeps at most the bytes it compares, across the switch to a digest', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 6000 }), { minLength: 1, maxLength: 8 }), (sizes) => {
        const messages: unknown[] = [{ role: 'system', content: 'Check ✓.' }];
        let layout = layoutOf(Buffer.from(JSON.stringify({ messages })))!;
        for (const [turn, size] of sizes.entries()) {
          const earlier = JSON.stringify({ messages });
          messages.push({ role: 'tool', content: `${turn} ✓ ${'x'.repeat(size)}` });
          const next = Buffer.from(JSON.stringify({ messages }));
          // The same conversation with one earlier character changed is never a continuation.
          const changedAt = earlier.lastIndexOf('✓');
          const changed = Buffer.from(
            `${earlier.slice(0, changedAt)}✗${earlier.slice(changedAt + 1, -2)},${JSON.stringify(messages.at(-1))}]}`,
          );
          expect(changed.length).toBe(next.length);
          expect(continueBody(layout, changed)).toBeNull();
          const continued = continueBody(layout, next)!;
          expect(continued.appended).toEqual([messages.at(-1)]);
          expect(continued.layout).toEqual(layoutOf(next));
          layout = continued.layout;
          expect(layout.messages?.length ?? 0).toBeLessThanOrEqual(keptMessageBytes);
          expect(layout.messages === null).toBe(layout.messagesEnd > keptMessageBytes);
        }
      }),
      { numRuns: 30 },
    );
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
    expect(layout.messageCount).toBe(2);
    expect(spaced.toString('utf8', layout.messagesEnd - 1, layout.messagesEnd + 4)).toBe('} ] ,');
    expect(layout.tail.toString()).toBe('] , "z" : null } ');
  });
});
