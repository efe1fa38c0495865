import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AdapterContext } from '../blackbox/adapter.js';
import { agentPackages, ensureAgentInstalled } from './agent-install.js';
import { CodexAdapter, codexConfig, codexFailure, codexOptionsSchema } from './codex.js';
import { codexItemSchema, codexItemsToChat } from './codex-items.js';

/** An adapter context outside a sandbox, with its runtime and work dirs under `base`. */
function contextIn(base: string, proxyOrigin: string): AdapterContext {
  return {
    runtimeDir: join(base, 'runtime'),
    workDir: base,
    proxyOrigin,
    proxyApiKey: 'key',
    apiPath: '/v1',
    systemPrompt: null,
    routerTimeoutMs: 60_000,
    sessionId: 'sample-a',
    instanceId: 'instance-a',
    insideSandbox: false,
    drainModelRequests: async () => {},
  };
}

describe('codex adapter', () => {
  it('turns app-server items into tool calls, tool results and replies', () => {
    const items = [
      { type: 'userMessage', id: 'u0', content: [{ type: 'text', text: 'hi' }] },
      { type: 'reasoning', id: 'r0', summary: ['Use the shell.'], content: [] },
      {
        type: 'commandExecution',
        id: 'i1',
        command: 'echo hi',
        aggregatedOutput: 'hi\n',
        exitCode: 0,
        status: 'completed',
      },
      { type: 'reasoning', id: 'r1', summary: [], content: ['Report it.'] },
      { type: 'agentMessage', id: 'i2', text: 'Done.', phase: null },
      { type: 'fileChange', id: 'f0', changes: [] },
    ].map((item) => codexItemSchema.parse(item));
    expect(codexItemsToChat(items)).toEqual([
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'Use the shell.',
        tool_calls: [
          { id: 'i1', type: 'function', function: { name: 'shell', arguments: '{"command":"echo hi"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'i1', content: 'hi\n' },
      { role: 'assistant', content: 'Done.', reasoning_content: 'Report it.' },
    ]);
  });

  it('maps its failure messages onto the turn error table', () => {
    expect(codexFailure('exceeded the context window of the model')).toMatchObject({ httpStatus: 413 });
    expect(codexFailure('Turn exceeded max_steps.')).toMatchObject({ httpStatus: 429 });
    expect(codexFailure('stream disconnected')).toMatchObject({ httpStatus: 502 });
  });

  it('runs commands without asking only inside a sandbox, and never retries a model request', () => {
    const options = codexOptionsSchema.parse({});
    const context = { proxyOrigin: 'http://127.0.0.1:9', apiPath: '/v1', systemPrompt: null };
    const inside = codexConfig(options, { ...context, insideSandbox: true });
    expect(inside).toContain('approval_policy = "never"');
    expect(inside).toContain('sandbox_mode = "danger-full-access"');
    expect(inside).toContain('base_url = "http://127.0.0.1:9/v1"');
    expect(inside).toContain('request_max_retries = 0');
    expect(inside).toContain('thread_unload_delay_secs = 0');
    const outside = codexConfig(options, { ...context, insideSandbox: false });
    expect(outside).toContain('approval_policy = "on-request"');
    expect(outside).toContain('sandbox_mode = "read-only"');
  });

  it('interrupts a turn whose model request hangs, and serves the next sample', async (context) => {
    let bin: string;
    try {
      bin = await ensureAgentInstalled(agentPackages.codex, { timeoutMs: 720_000 });
    } catch (error) {
      return context.skip(`cannot install Codex: ${String(error)}`);
    }
    // A model that starts its answer and never ends it.
    let requests = 0;
    const model = createServer((_request, response) => {
      requests += 1;
      response.writeHead(200, { 'content-type': 'text/event-stream' });
    });
    await new Promise<void>((resolve) => model.listen(0, '127.0.0.1', resolve));
    const base = mkdtempSync(join(tmpdir(), 'paddock-codex-'));
    const previous = process.env.DRESSAGE_CODEX_BIN;
    process.env.DRESSAGE_CODEX_BIN = bin;
    const adapter = new CodexAdapter({});
    try {
      const pins: [string, string | undefined][] = [];
      await adapter.init({
        ...contextIn(base, `http://127.0.0.1:${(model.address() as AddressInfo).port}`),
        pinAgentSession: (id, header) => pins.push([id, header]),
      });
      expect(await adapter.health()).toBe(true);
      const controller = new AbortController();
      const turn = adapter.runTurn({ turnId: 't1', text: 'hi', signal: controller.signal });
      while (requests === 0) await new Promise((resolve) => setTimeout(resolve, 20));
      controller.abort();
      await expect(turn).rejects.toMatchObject({ code: 'cancelled' });
      expect(pins).toEqual([[expect.any(String), 'thread-id']]);
      // The server stays up; the next sample gets a thread of its own.
      await adapter.recycle();
      expect(adapter.processGroups()).toHaveLength(1);
      const next = new AbortController();
      const second = adapter.runTurn({ turnId: 't2', text: 'hi', signal: next.signal });
      while (requests < 2) await new Promise((resolve) => setTimeout(resolve, 20));
      next.abort();
      await expect(second).rejects.toMatchObject({ code: 'cancelled' });
      expect(pins).toHaveLength(2);
      expect(pins[1]?.[0]).not.toBe(pins[0]?.[0]);
    } finally {
      await adapter.close();
      model.close();
      if (previous === undefined) delete process.env.DRESSAGE_CODEX_BIN;
      else process.env.DRESSAGE_CODEX_BIN = previous;
      rmSync(base, { recursive: true, force: true });
    }
  }, 900_000);

  it('fails the turn, and nothing else, when the app-server exits while the turn starts', async () => {
    // A stand-in that answers like `codex app-server` until turn/start, then exits: a crash at
    // that moment cannot be provoked in the real CLI.
    const base = mkdtempSync(join(tmpdir(), 'paddock-codex-exit-'));
    const script = join(base, 'codex');
    writeFileSync(
      script,
      `#!/usr/bin/env node
let buffer = '';
process.stdin.on('data', (chunk) => {
  buffer += chunk;
  for (let at = buffer.indexOf('\\n'); at >= 0; at = buffer.indexOf('\\n')) {
    const message = JSON.parse(buffer.slice(0, at));
    buffer = buffer.slice(at + 1);
    if (message.method === 'turn/start') process.exit(3);
    const result = message.method === 'thread/start' ? { thread: { id: 'th-1' } } : {};
    if (message.id !== undefined) process.stdout.write(JSON.stringify({ id: message.id, result }) + '\\n');
  }
});
`,
      { mode: 0o755 },
    );
    const previous = process.env.DRESSAGE_CODEX_BIN;
    process.env.DRESSAGE_CODEX_BIN = script;
    const adapter = new CodexAdapter({});
    try {
      await adapter.init(contextIn(base, 'http://127.0.0.1:9'));
      const turn = adapter.runTurn({ turnId: 't1', text: 'hi', signal: new AbortController().signal });
      await expect(turn).rejects.toMatchObject({ code: 'unavailable' });
      expect(await adapter.health()).toBe(false);
      await expect(adapter.recycle()).rejects.toMatchObject({ code: 'unavailable' });
    } finally {
      await adapter.close();
      if (previous === undefined) delete process.env.DRESSAGE_CODEX_BIN;
      else process.env.DRESSAGE_CODEX_BIN = previous;
      rmSync(base, { recursive: true, force: true });
    }
  });
});
