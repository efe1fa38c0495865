// The real opencode binary, driven by its adapter outside a sandbox, against a scripted model: what it
// sends per turn. Measured here so the side requests and session headers the README states stay true.
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { agentPackages, ensureAgentInstalled } from './agent-install.js';
import { OpencodeAdapter } from './opencode.js';

type Json = Record<string, unknown>;

describe('opencode 1.18.33 model requests', () => {
  let model: ScriptedModelServer;
  let runtimeDir: string;
  // Set by a test whose model call must hang until it says so; null answers at once.
  let held: Promise<void> | null = null;
  let skipReason: string | null = null;
  let bin = '';

  beforeAll(async () => {
    try {
      bin = await ensureAgentInstalled(agentPackages.opencode, { timeoutMs: 720_000 });
    } catch (error) {
      skipReason = `cannot install opencode: ${String(error)}`;
      console.warn(`[paddock] skipping: ${skipReason}`);
      return;
    }
    model = new ScriptedModelServer(async () => {
      if (held === null) return { content: 'Done.' };
      await held;
      return {
        content: '',
        tool_calls: [{ name: 'bash', arguments: { command: 'echo late > late.txt', description: 'Write' } }],
      };
    });
    await model.start();
    runtimeDir = mkdtempSync(join(tmpdir(), 'paddock-opencode-'));
    mkdirSync(join(runtimeDir, 'work'));
  }, 900_000);

  // The adapter's context in `dir`, with a base URL that carries the session, as the Dressage
  // proxy serves it.
  const contextFor = (dir: string) => ({
    runtimeDir: dir,
    workDir: join(dir, 'work'),
    proxyOrigin: `${model.url}/s/rollout-1`,
    proxyApiKey: 'key',
    apiPath: '/v1',
    systemPrompt: 'You are a shell agent. Use bash, then answer in one line.',
    routerTimeoutMs: 60_000,
    sessionId: 'rollout-1',
    instanceId: 'group-1',
    drainModelRequests: async () => undefined,
  });

  afterAll(async () => {
    await model?.close();
    if (runtimeDir) rmSync(runtimeDir, { recursive: true, force: true });
  });

  it('sends no title request, offers only allowed tools, keeps a session base URL, sets its own session headers', async (context) => {
    if (skipReason !== null) context.skip();
    const previous = process.env.DRESSAGE_OPENCODE_BIN;
    process.env.DRESSAGE_OPENCODE_BIN = bin;
    const adapter = new OpencodeAdapter({ permission: { '*': 'deny', bash: 'allow' } });
    try {
      await adapter.init(contextFor(runtimeDir));
      const result = await adapter.runTurn({
        turnId: 'turn-1',
        text: 'Answer with the word Done.',
        signal: new AbortController().signal,
      });
      expect(result.outputs.at(-1)).toMatchObject({ role: 'assistant', content: 'Done.' });
    } finally {
      await adapter.close();
      if (previous === undefined) delete process.env.DRESSAGE_OPENCODE_BIN;
      else process.env.DRESSAGE_OPENCODE_BIN = previous;
    }
    // One agent request: the adapter's config disables the title agent, which would otherwise send
    // a tool-less title-generation request in the same session, concurrently with the first turn.
    expect(model.requests).toHaveLength(1);
    const [request] = model.requests;
    expect(request!.path).toBe('/s/rollout-1/v1/chat/completions');
    const body = request!.body as { tools?: Json[]; messages: Json[]; stream?: boolean };
    expect(body.stream).toBe(true);
    // Denied tools are left out of the request: bash alone, not opencode's ten.
    expect(body.tools?.map((tool) => (tool.function as Json).name)).toEqual(['bash']);
    expect(String(body.messages[0]!.content)).toMatch(/^You are a shell agent\. Use bash/);
    // Its own session id, set on every request over provider headers: only the URL can pin it.
    expect(request!.headers['x-session-id']).toMatch(/^ses_/);
    expect(request!.headers['x-session-affinity']).toBe(request!.headers['x-session-id']);
  }, 300_000);

  // A kept agent skips the abort once a turn's answer came back; a turn cut off before that must
  // still be stopped, or opencode would go on to run its tools into the next sample's slot.
  it('stops a turn cut off while its model call hangs: no tool runs after the abort', async (context) => {
    if (skipReason !== null) context.skip();
    const dir = mkdtempSync(join(tmpdir(), 'paddock-opencode-cut-'));
    mkdirSync(join(dir, 'work'));
    let release = () => {};
    held = new Promise((resolve) => {
      release = resolve;
    });
    const previous = process.env.DRESSAGE_OPENCODE_BIN;
    process.env.DRESSAGE_OPENCODE_BIN = bin;
    const adapter = new OpencodeAdapter({ permission: { '*': 'deny', bash: 'allow' } });
    const before = model.requests.length;
    try {
      await adapter.init(contextFor(dir));
      const cut = new AbortController();
      const turn = adapter.runTurn({ turnId: 'turn-1', text: 'Write the file.', signal: cut.signal });
      while (model.requests.length === before) await new Promise((resolve) => setTimeout(resolve, 50));
      cut.abort();
      await expect(turn).rejects.toThrow();
      await adapter.abort();
      // The hanging call now answers with a tool call: an opencode still running the turn would
      // write the file and ask the model again.
      release();
      await new Promise((resolve) => setTimeout(resolve, 3000));
      expect(existsSync(join(dir, 'work', 'late.txt'))).toBe(false);
      expect(model.requests.length - before).toBe(1);
    } finally {
      held = null;
      release();
      await adapter.close();
      if (previous === undefined) delete process.env.DRESSAGE_OPENCODE_BIN;
      else process.env.DRESSAGE_OPENCODE_BIN = previous;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
