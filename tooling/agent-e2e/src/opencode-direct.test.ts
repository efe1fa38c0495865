// opencode pointed straight at the recording proxy, with no BlackboxServer in between: it sets its
// own X-Session-Id (its `ses_…` id) on every model request, so only the proxy's session base URL
// (`/s/{session}/v1`) can pin its calls to the rollout's session.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ProxyProcess, startProxyProcess } from '@dressage/guarantees/proxy-process';
import { agentPackages, ensureAgentInstalled, OpencodeAdapter } from '@dressage/paddock';
import { ProxyClient, ProxyClientError } from '@dressage/proxy';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QwenAgentModel } from './qwen-agent-model.js';

describe('opencode straight at the recording proxy', () => {
  let model: QwenAgentModel | null = null;
  let proxy: ProxyProcess | null = null;
  let scratch = '';
  let bin = '';
  let skipReason: string | null = null;

  beforeAll(async () => {
    try {
      bin = await ensureAgentInstalled(agentPackages.opencode, { timeoutMs: 720_000 });
    } catch (error) {
      skipReason = `cannot install opencode: ${String(error)}`;
      console.warn(`[agent-e2e] skipping: ${skipReason}`);
      return;
    }
    scratch = mkdtempSync(join(tmpdir(), 'agent-e2e-opencode-direct-'));
    mkdirSync(join(scratch, 'work'));
    model = await QwenAgentModel.start();
    proxy = await startProxyProcess(model.url, ['--store-dir', 'none']);
  }, 900_000);

  afterAll(async () => {
    await proxy?.kill();
    await model?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("records under the base URL's session, which a finalize by the rollout's id finds", async (context) => {
    if (skipReason !== null) return context.skip(skipReason);
    const client = new ProxyClient({ baseUrl: proxy!.url });
    const session = 'rollout-direct-1';
    const previous = process.env.DRESSAGE_OPENCODE_BIN;
    process.env.DRESSAGE_OPENCODE_BIN = bin;
    // No tools: the agent only answers (nothing runs on this host, outside a sandbox).
    const adapter = new OpencodeAdapter({ permission: { '*': 'deny' } });
    try {
      const base = client.sessionBaseUrl(session);
      await adapter.init({
        runtimeDir: scratch,
        workDir: join(scratch, 'work'),
        proxyOrigin: base.slice(0, -'/v1'.length),
        proxyApiKey: 'unused',
        apiPath: '/v1',
        systemPrompt: 'Answer in one line.',
        routerTimeoutMs: 120_000,
        sessionId: session,
        instanceId: 'group-1',
        drainModelRequests: async () => undefined,
      });
      const result = await adapter.runTurn({
        turnId: 'turn-1',
        text: 'Say hello.',
        signal: new AbortController().signal,
      });
      expect(result.outputs.at(-1)?.role).toBe('assistant');
      expect(result.backendSessionId).toMatch(/^ses_/);
      // Every engine call was routed under the rollout's session, none under opencode's own id.
      expect(model!.replies.length).toBeGreaterThanOrEqual(1);
      const own = await client.finalizeSession(result.backendSessionId!).catch((error: unknown) => error);
      expect(own).toBeInstanceOf(ProxyClientError);
      expect((own as ProxyClientError).status).toBe(404);
      const finalized = await client.finalizeSession(session);
      expect(finalized).toMatchObject({ success: true, session_id: session });
      expect(Number(finalized.num_steps)).toBe(model!.replies.length);
    } finally {
      await adapter.close();
      if (previous === undefined) delete process.env.DRESSAGE_OPENCODE_BIN;
      else process.env.DRESSAGE_OPENCODE_BIN = previous;
    }
  }, 300_000);
});
