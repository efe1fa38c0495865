// The servers of the proxy benchmark, one per child process so the load generator does not share
// their event loop: `engine` (a zero-delay SGLang stub), `bare` (an HTTP pass-through to it) and
// `proxy` (the real proxy with the Qwen3 tokenizer). Each prints `ready <url>` when listening.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { qwen35ChatTemplatePath } from '../src/__fixtures__/harness.js';
import { createProxyConfig } from '../src/config.js';
import { installHeapGrowthPolicy } from '../src/heap-growth.js';
import { startProxyServer } from '../src/server.js';

// `proxy` takes an optional fourth argument: its largest request body in MiB.
const [role, engineUrl, modelDirectory, maxRequestMb] = process.argv.slice(2);

// A fixed 16-token answer: the stub spends no time per request beyond writing these bytes.
const outputText = 'The answer is forty-two, as the stub computed it.';
const outputIds = [785, 4226, 374, 35398, 34429, 11, 438, 279, 13633, 24182, 432, 13, 151645, 198, 100, 101];
const engineReply = JSON.stringify({
  text: `${outputText}<|im_end|>`,
  output_ids: outputIds,
  meta_info: {
    finish_reason: { type: 'stop' },
    weight_version: 'v1',
    output_token_logprobs: outputIds.map((id) => [-0.125, id, null]),
  },
});

function listen(server: ReturnType<typeof createServer>): Promise<string> {
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () =>
      resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}`),
    );
  });
}

async function main(): Promise<void> {
  if (role === 'engine') {
    const server = createServer((incoming, response) => {
      incoming.resume();
      incoming.on('end', () => {
        if (incoming.url === '/workers') {
          response.writeHead(200, { 'content-type': 'application/json' });
          response.end('{"workers":[]}');
          return;
        }
        response.writeHead(200, {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(engineReply),
        });
        response.end(engineReply);
      });
    });
    server.keepAliveTimeout = 60_000;
    process.stdout.write(`ready ${await listen(server)}\n`);
  } else if (role === 'bare') {
    const dispatcher = new Agent({ connections: 512, keepAliveTimeout: 60_000 });
    const server = createServer(async (incoming, response) => {
      const chunks: Buffer[] = [];
      for await (const chunk of incoming) chunks.push(chunk as Buffer);
      const upstream = await request(`${engineUrl}/generate`, {
        method: 'POST',
        dispatcher,
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat(chunks),
      });
      const body = await upstream.body.text();
      response.writeHead(upstream.statusCode, {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      });
      response.end(body);
    });
    server.keepAliveTimeout = 60_000;
    process.stdout.write(`ready ${await listen(server)}\n`);
  } else if (role === 'proxy') {
    // As the bin does: the proxy is measured as deployed.
    installHeapGrowthPolicy();
    const proxy = await startProxyServer(
      createProxyConfig({
        tokenizerPath: modelDirectory!,
        // The Qwen3 tokenizer with the Qwen3.5-style test template in force (the qwen3_5 renderer).
        chatTemplate: qwen35ChatTemplatePath,
        sglangRouterUrl: engineUrl!,
        host: '127.0.0.1',
        port: 0,
        toolCallParseBackend: 'local',
        reasoningParseBackend: 'local',
        streamHeartbeatIntervalSeconds: 0,
        storeDirectory: null,
        ...(maxRequestMb === undefined ? {} : { maxRequestBytes: Number(maxRequestMb) * 1024 ** 2 }),
      }),
    );
    process.stdout.write(`ready ${proxy.url}\n`);
  } else {
    throw new Error(`unknown role ${role}`);
  }
}

// A clean exit on SIGINT lets profilers (--cpu-prof) write their output.
process.on('SIGINT', () => process.exit(0));

// The load generator asks for this process's CPU time (user + system microseconds) over IPC, so
// it can report CPU per request, which is far less sensitive to machine load than wall time.
process.on('message', (message) => {
  if (message === 'cpu') {
    const usage = process.cpuUsage();
    process.send?.({ cpu: usage.user + usage.system });
  }
});

main().catch((error: unknown) => {
  process.stderr.write(`${String(error)}\n`);
  process.exit(1);
});
