// The servers of the workload benchmark, each in its own process: `engine`, a zero-delay SGLang
// stub answering known token ids (a Qwen3 tool call with its reasoning, tokenized once at startup by
// the real tokenizer), `proxy`, the real proxy as `dressage-proxy` runs it (TITO, the Qwen3
// template of the model directory, the persistent store on), and `floor`, a forwarder doing only the
// work the wire protocol forces on any token-recording proxy (see `floor` below). Each prints
// `ready <url>` when listening; `floor` answers `cpu` over IPC with its CPU time so far, as the
// servers of bench-servers.ts do.
// The proxy answers `memory` over IPC with its resident memory (peak, and current after a full
// garbage collection), a byte count of its sessions and the garbage-collection pauses so far;
// `profile` starts V8's CPU profiler, and `profile` with a path stops it and writes the profile there.
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { Session as InspectorSession } from 'node:inspector/promises';
import type { AddressInfo } from 'node:net';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { Agent, type Dispatcher } from 'undici';
import { random } from '../src/__fixtures__/seeded-random.js';
import { createProxyConfig } from '../src/config.js';
import { installHeapGrowthPolicy } from '../src/heap-growth.js';
import { loadPromptTokenizer } from '../src/prompt-tokenizer.js';
import { startProxyServer } from '../src/server.js';
import { sessionFootprint, sumFootprints } from './session-footprint.js';
import { toolOutput } from './workload-text.js';

const [role, ...args] = process.argv.slice(2);

function listen(server: ReturnType<typeof createServer>): Promise<string> {
  return new Promise((resolve) => {
    server.listen({ port: 0, host: '127.0.0.1', backlog: 8192 }, () =>
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
    );
  });
}

/** Peak and current resident bytes of this process (Linux), else the current RSS for both. */
function residentBytes(): { peak: number; current: number } {
  try {
    const status = readFileSync('/proc/self/status', 'utf8');
    const field = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) * 1024;
    return { peak: field('VmHWM'), current: field('VmRSS') };
  } catch {
    const rss = process.memoryUsage().rss;
    return { peak: rss, current: rss };
  }
}

// The model's turn: a short reasoning and one shell call, in the Qwen3 format. The command rotates
// so consecutive turns differ.
const commands = [
  'grep -rn "parseConfig" src | head -40',
  'cat src/server/routes.ts',
  'npm test -- --run src/store.test.ts 2>&1 | tail -60',
  'sed -n 120,220p src/session/manager.ts',
  'git diff --stat HEAD~3',
  'ls -la src/components src/hooks',
];

function replyText(index: number): string {
  const command = commands[index % commands.length]!;
  return (
    `<think>\nThe last output shows where the failure comes from; next I need to look at ${command.split(' ')[0]} ` +
    `to see how the value is produced before changing anything.\n</think>\n\n` +
    `<tool_call>\n${JSON.stringify({ name: 'run_command', arguments: { command } })}\n</tool_call>`
  );
}

async function engine(modelDirectory: string): Promise<void> {
  const tokenizer = await loadPromptTokenizer(
    createProxyConfig({ tokenizerPath: modelDirectory, tokenBuildModel: 'qwen3' }),
  );
  const imEnd = 151645;
  const replies = commands.map((_, index) => {
    const text = replyText(index);
    const ids = [...tokenizer.encodeText(text), imEnd];
    return JSON.stringify({
      text: `${text}<|im_end|>`,
      output_ids: ids,
      meta_info: {
        finish_reason: { type: 'stop' },
        weight_version: 'v1',
        prompt_tokens: 0,
        completion_tokens: ids.length,
        output_token_logprobs: ids.map((id, position) => [-0.05 - (position % 7) * 0.01, id, null]),
      },
    });
  });
  let count = 0;
  // `/generate` body bytes by sender: the proxy routes with `x-smg-routing-key`, the floor does not.
  const generateBytes = { proxy: 0, proxyRequests: 0, floor: 0, floorRequests: 0 };
  process.on('message', (message: unknown) => {
    if ((message as { kind?: string }).kind === 'bytes') process.send?.({ kind: 'bytes', ...generateBytes });
  });
  const server = createServer((incoming, response) => {
    const fromProxy = incoming.headers['x-smg-routing-key'] !== undefined;
    let bytes = 0;
    incoming.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    incoming.on('end', () => {
      if (incoming.url === '/generate') {
        if (fromProxy) {
          generateBytes.proxy += bytes;
          generateBytes.proxyRequests += 1;
        } else {
          generateBytes.floor += bytes;
          generateBytes.floorRequests += 1;
        }
      }
      if (incoming.url === '/workers') {
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end('{"workers":[]}');
        return;
      }
      const reply = replies[count++ % replies.length]!;
      response.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(reply),
      });
      response.end(reply);
    });
  });
  server.keepAliveTimeout = 600_000;
  process.stdout.write(`ready ${await listen(server)}\n`);
}

async function proxy(engineUrl: string, modelDirectory: string, storeDirectory: string): Promise<void> {
  // As the bin does: the proxy is measured as deployed.
  const policy = installHeapGrowthPolicy();
  const server = await startProxyServer(
    createProxyConfig({
      tokenizerPath: modelDirectory,
      // The model directory's own (Qwen3) template, JSON tool calls: the qwen3 family.
      chatTemplate: null,
      tokenBuildModel: 'qwen3',
      tokenBuildMode: 'tito',
      sglangRouterUrl: engineUrl,
      host: '127.0.0.1',
      port: 0,
      toolCallParseBackend: 'local',
      reasoningParseBackend: 'local',
      streamHeartbeatIntervalSeconds: 0,
      storeDirectory,
    }),
  );
  server.server.keepAliveTimeout = 600_000;
  // Every garbage-collection pause of the event loop's thread, in milliseconds: a long one delays
  // every request in flight, so the latency percentiles are read next to them. The collections this
  // probe forces (`gc()` before reading retained bytes) are not the proxy's and are left out.
  const pauses: number[] = [];
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const detail = 'detail' in entry ? (entry.detail as { flags?: number } | null) : null;
      const flags = detail?.flags ?? 0;
      if ((flags & constants.NODE_PERFORMANCE_GC_FLAGS_FORCED) === 0) pauses.push(entry.duration);
    }
  }).observe({ entryTypes: ['gc'] });
  let profiler: InspectorSession | null = null;
  process.on('message', async (message: unknown) => {
    const request = message as { kind?: string; sessions?: string[]; path?: string };
    if (request.kind === 'profile') {
      if (request.path === undefined) {
        profiler = new InspectorSession();
        profiler.connect();
        await profiler.post('Profiler.enable');
        await profiler.post('Profiler.start');
      } else if (profiler !== null) {
        const { profile } = await profiler.post('Profiler.stop');
        writeFileSync(request.path, JSON.stringify(profile));
        profiler.disconnect();
        profiler = null;
      }
      process.send?.({ kind: 'profile' });
      return;
    }
    if (request.kind !== 'memory') return;
    const cpu = process.cpuUsage();
    // Retained bytes, not garbage: the benchmark starts the proxy with --expose-gc.
    (globalThis as { gc?: () => void }).gc?.();
    const footprints = [];
    for (const id of request.sessions ?? []) {
      const session = server.service.session(id);
      if (session !== undefined) footprints.push(sessionFootprint(session));
    }
    const usage = process.memoryUsage();
    process.send?.({
      kind: 'memory',
      resident: residentBytes(),
      heapUsed: usage.heapUsed,
      external: usage.external,
      arrayBuffers: usage.arrayBuffers,
      sessions: sumFootprints(footprints),
      sessionCount: footprints.length,
      cpuMicroseconds: cpu.user + cpu.system,
      gcPauses: pauses.slice(),
      heapGrowingPercent: policy.percent,
    });
  });
  process.stdout.write(`ready ${server.url}\n`);
}

/**
 * A lower bound of what any proxy in front of SGLang's `/generate` does per request: read the
 * agent's body (not even parsed: a proxy that compares it with the previous one parses only what is
 * new), write a `/generate` body carrying the whole history as `input_ids` (the endpoint is
 * stateless; the agent sends the id count the proxy sent, in `x-prompt-tokens`), read and parse the
 * engine's answer, answer the agent. No tokenizing, rendering, recording or storing, and the ids'
 * JSON digits are written once at startup and sliced: what it spends is this machine's HTTP floor
 * for the workload's bytes, measured in the same run as the proxy.
 */
async function floor(engineUrl: string, modelDirectory: string): Promise<void> {
  const maxIds = 262_144;
  // The workload's own kind of text, tokenized once by the real tokenizer and repeated: ids of the
  // same widths as the proxy's, so both write about the same bytes (the bench prints both).
  const tokenizer = await loadPromptTokenizer(
    createProxyConfig({ tokenizerPath: modelDirectory, tokenBuildModel: 'qwen3' }),
  );
  const sample = tokenizer.encodeText(toolOutput(random(7), 200_000));
  const digits: string[] = [];
  for (let index = 0; index < maxIds; index++) digits.push(String(sample[index % sample.length]));
  const idsText = Buffer.from(digits.join(','));
  // Byte offset after the n-th id (n >= 1), so a body of n ids is one slice of `idsText`.
  const ends = new Int32Array(maxIds + 1);
  for (let index = 0, at = 0; index < maxIds; index++) {
    at += digits[index]!.length + (index > 0 ? 1 : 0);
    ends[index + 1] = at;
  }
  const head = Buffer.from('{"input_ids":[');
  const tail = Buffer.from(
    '],"sampling_params":{"temperature":1,"max_new_tokens":4096,"skip_special_tokens":false},"return_logprob":true}',
  );
  // The proxy's own way to the engine (engine-client.ts): undici's dispatcher with a plain handler.
  const engine = new URL(engineUrl);
  const dispatcher = new Agent({ connections: 512, keepAliveTimeout: 60_000, pipelining: 1 });
  const post = (body: Buffer) =>
    new Promise<Buffer>((resolve, reject) => {
      const chunks: Buffer[] = [];
      dispatcher.dispatch(
        {
          origin: engine.origin,
          path: '/generate',
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        },
        {
          onConnect() {},
          onHeaders: () => true,
          onData(chunk: Buffer) {
            chunks.push(chunk);
            return true;
          },
          onComplete: () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)),
          onError: reject,
        } as Dispatcher.DispatchHandler,
      );
    });
  const server = createServer((incoming, response) => {
    incoming.on('data', () => {});
    incoming.on('end', async () => {
      const count = Math.min(maxIds, Number(incoming.headers['x-prompt-tokens'] ?? 0));
      const generate = Buffer.concat([head, idsText.subarray(0, ends[count]), tail]);
      const result = JSON.parse((await post(generate)).toString('utf8')) as {
        text: string;
        meta_info: { completion_tokens: number };
      };
      const reply = JSON.stringify({
        id: 'chatcmpl-floor',
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: result.text }, finish_reason: 'stop' }],
        usage: { prompt_tokens: count, completion_tokens: result.meta_info.completion_tokens },
      });
      response.writeHead(200, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(reply),
      });
      response.end(reply);
    });
  });
  server.keepAliveTimeout = 600_000;
  process.on('message', (message: unknown) => {
    if (message !== 'cpu') return;
    const cpu = process.cpuUsage();
    process.send?.({ cpu: cpu.user + cpu.system });
  });
  process.stdout.write(`ready ${await listen(server)}\n`);
}

async function main(): Promise<void> {
  if (role === 'engine') await engine(args[0]!);
  else if (role === 'proxy') await proxy(args[0]!, args[1]!, args[2]!);
  else if (role === 'floor') await floor(args[0]!, args[1]!);
  else throw new Error(`unknown role ${role}`);
}

process.on('SIGINT', () => process.exit(0));

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`);
  process.exit(1);
});
