import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ChatMessage, createSample, type Sample } from '@dressage/protocol';
import { LocalBwrapProvider, type SandboxLease, type SandboxProvider } from '@dressage/sandbox';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptAgentAdapter } from '../__fixtures__/script-agent.js';
import { type Script, ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { BlackboxServer } from '../blackbox/server.js';
import { createBlackboxGenerate } from './blackbox-generate.js';
import { httpTrajectoryProxy } from './trajectory-proxy.js';
import { makeGenerate, PaddockWhiteboxAgent, WhiteboxAgent, type WhiteboxRunContext } from './whitebox.js';
import { WhiteboxToolPaddock } from './whitebox-tools.js';

type Json = Record<string, unknown>;

const script: Script = (request) => {
  const messages = request.messages as Json[];
  const last = messages.at(-1) as Json;
  const text = String(messages.find((message) => message.role === 'user')?.content ?? '');
  if (text.includes('overflow')) {
    return {
      status: 413,
      body: { error: 'context_overflow', message: 'overflow', details: { phase: 'input' } },
    };
  }
  if (text.includes('malformed')) {
    const usage = { prompt_tokens: 1, completion_tokens: 0, total_tokens: 1 };
    return {
      status: 200,
      body: { id: 'c', object: 'chat.completion', created: 1, model: 'm', choices: [], usage },
    };
  }
  if (text.includes('timeout'))
    return new Promise((resolve) => setTimeout(() => resolve({ content: 'late' }), 1500));
  if (last.role === 'tool') return { content: 'finished' };
  return { content: 'working', tool_calls: [{ name: 'shell', arguments: { cmd: 'echo tool-output' } }] };
};

// A provider whose "sandbox" is one in-process BlackboxServer per lease, guarded by its own key as
// a pool slot's server is: the generate function must send the endpoint's headers.
function inProcessProvider(workDir: string): SandboxProvider & { live: number } {
  const servers = new Map<string, BlackboxServer>();
  const provider = {
    name: 'in_process',
    live: 0,
    async create(spec: { trajectoryId: string }): Promise<SandboxLease> {
      const apiKey = `key-${spec.trajectoryId}`;
      const server = new BlackboxServer({
        config: {
          host: '127.0.0.1',
          port: 0,
          runtime_root: join(workDir, 'rt'),
          runtime_health_check_retries: 0,
          inside_sandbox: true,
        },
        apiKey,
        workDir,
        adapters: { script_agent: () => new ScriptAgentAdapter() },
      });
      const url = await server.listen();
      servers.set(spec.trajectoryId, server);
      provider.live += 1;
      return {
        trajectoryId: spec.trajectoryId,
        provider: 'in_process',
        sandboxId: spec.trajectoryId,
        endpoints: { blackbox: { url, headers: { authorization: `Bearer ${apiKey}` } } },
        capabilities: ['command'],
        metadata: {},
      };
    },
    async terminate(lease: SandboxLease | string) {
      const id = typeof lease === 'string' ? lease : lease.trajectoryId;
      const server = servers.get(id);
      servers.delete(id);
      if (server) {
        provider.live -= 1;
        await server.close();
      }
    },
    getPublicUrl: async () => '',
    runCommand: async () => {
      throw new Error('unused');
    },
    readFile: async () => Buffer.alloc(0),
    writeFile: async () => {},
  };
  return provider as never;
}

describe('generate functions', () => {
  let model: ScriptedModelServer;
  let workDir: string;

  beforeAll(async () => {
    model = new ScriptedModelServer(script);
    await model.start();
    workDir = mkdtempSync(join(tmpdir(), 'paddock-generate-'));
  });
  afterAll(async () => {
    await model.close();
    rmSync(workDir, { recursive: true, force: true });
  });

  const template = (prompt: string, extra: Json = {}): Sample =>
    createSample({
      index: 3,
      group_index: 1,
      prompt,
      label: 'gold',
      metadata: { instance_id: 'task-1', ...extra },
    });

  it('runs the blackbox lifecycle into trainable samples and classifies failures', async () => {
    const provider = inProcessProvider(workDir);
    const options = {
      provider,
      proxy: httpTrajectoryProxy(model.url),
      proxyUrl: model.url,
      blackboxType: 'script_agent',
      retry: { maxAttempts: 2, initialDelaySeconds: 0.01 },
    };
    // Only the timeout case runs with a timeout below its 1.5 s reply: a loaded machine must not
    // time out the others.
    const generate = createBlackboxGenerate({ ...options, serverConfig: { backend_timeout: 60 } });
    const shortTimeout = createBlackboxGenerate({ ...options, serverConfig: { backend_timeout: 0.5 } });
    const [sample] = await generate(
      template('solve it', {
        blackbox_execute_cmds: { before_agent: [{ name: 'prep', cmd: 'echo prep', required: true }] },
      }),
    );
    expect(sample, JSON.stringify(sample?.metadata)).toMatchObject({
      status: 'completed',
      rollout_id: 3,
      remove_sample: false,
      response: 'finished',
    });
    expect(sample?.session_id).toMatch(/^bbs-/);
    expect(sample?.loss_mask?.some((value) => value === 1)).toBe(true);
    expect(sample?.loss_mask?.some((value) => value === 0)).toBe(true);
    expect((sample?.metadata.execute_cmds as Json[] | undefined)?.[0]).toMatchObject({
      name: 'prep',
      stdout: 'prep\n',
    });

    // Context overflow is harvested: what was recorded before it still trains.
    const [harvested] = await generate(template('overflow please'));
    expect(harvested?.metadata).toMatchObject({
      blackbox_agent_early_stop: true,
      blackbox_agent_early_stop_kind: 'context_overflow',
    });

    // A backend timeout aborts: a no-gradient placeholder with the failure recorded.
    const [timedOut] = await shortTimeout(template('timeout please'));
    expect(timedOut).toMatchObject({ remove_sample: true, status: 'failed', loss_mask: [] });
    expect(timedOut?.metadata).toMatchObject({
      blackbox_agent_error_kind: 'backend_timeout',
      instance_id: 'task-1',
    });
    expect((timedOut?.metadata.blackbox_failure_history as Json[] | undefined)?.length).toBe(1);
    expect(provider.live).toBe(0);
  });

  it('runs a whitebox agent with sandbox tools through makeGenerate', async () => {
    const provider = new LocalBwrapProvider({
      slots: 1,
      baseDir: join(workDir, 'pool'),
      unshareNet: true,
      healthIntervalSeconds: 0,
    });
    class ShellAgent extends PaddockWhiteboxAgent {
      async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
        const messages: ChatMessage[] = [{ role: 'user', content: String(sample.prompt) }];
        for (let step = 0; step < 4; step++) {
          const reply = await context.chat({ model: 'm', messages });
          const message = reply.choices[0]!.message;
          messages.push(message);
          const calls = message.tool_calls ?? [];
          if (calls.length === 0) return String(message.content);
          for (const call of calls) {
            const args = JSON.parse(call.function.arguments) as Json;
            const [text] = await this.tools.toolCall('shell.exec', args);
            await this.tools.toolCall('file.write', { path: 'log.txt', content: text, append: true });
            const [logged] = await this.tools.toolCall('file.read', { path: 'log.txt' });
            messages.push({ role: 'tool', tool_call_id: call.id, content: logged });
          }
        }
        return null;
      }
    }
    const generate = makeGenerate(ShellAgent, {
      proxy: httpTrajectoryProxy(model.url),
      proxyUrl: model.url,
      provider,
    });
    const [sample] = await generate(template('use the shell'));
    expect(sample?.session_id).toMatch(/^wb-[0-9a-f]{32}$/);
    expect(sample).toMatchObject({ status: 'completed', response: 'finished' });
    const messages = sample?.metadata.messages as Json[];
    expect(messages.find((message) => message.role === 'tool')?.content).toBe('tool-output\n');
    expect(provider.pool.status().leases).toBe(0);
    await provider.close();
  });

  it('fills sampling defaults, merges agent metadata, and turns a cancelled run into a placeholder', async () => {
    class AnswerAgent extends WhiteboxAgent {
      async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
        const reply = await context.chat({
          model: 'm',
          messages: [{ role: 'user', content: String(sample.prompt) }],
          temperature: 0.5,
        });
        context.metadata.answer_seen = reply.choices[0]?.message.content;
        if (context.signal.aborted) throw new Error('cancelled');
        return String(reply.choices[0]?.message.content);
      }
    }
    const generate = makeGenerate(AnswerAgent, {
      proxy: httpTrajectoryProxy(model.url),
      proxyUrl: model.url,
    });
    const before = model.requests.length;
    const [sample] = await generate(template('answer directly'), {
      temperature: 1,
      top_p: 0.9,
      max_new_tokens: 7,
    });
    const body = model.requests
      .slice(before)
      .find((request) => request.path.endsWith('/chat/completions'))?.body;
    // The agent's own temperature wins; the scheduler's parameters fill the rest.
    expect(body).toMatchObject({ temperature: 0.5, top_p: 0.9, max_tokens: 7, stream: false });
    expect(sample?.metadata.answer_seen).toBe('working');
    expect(sample?.metadata.instance_id).toBe('task-1');

    const controller = new AbortController();
    controller.abort();
    const [cancelled] = await generate(template('answer directly'), {}, { signal: controller.signal });
    expect(cancelled).toMatchObject({ remove_sample: true, status: 'failed' });
    expect(String(cancelled?.metadata.whitebox_error)).toMatch(/abort/i);
  });

  it('refuses an answer that is not a chat completion, naming the field, and ends the run in a placeholder', async () => {
    class AskAgent extends WhiteboxAgent {
      async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
        const reply = await context.chat({ messages: [{ role: 'user', content: String(sample.prompt) }] });
        return reply.choices[0]!.message.content;
      }
    }
    const generate = makeGenerate(AskAgent, { proxy: httpTrajectoryProxy(model.url), proxyUrl: model.url });
    const [sample] = await generate(template('a malformed answer'));
    expect(sample).toMatchObject({ remove_sample: true, status: 'failed' });
    expect(String(sample?.metadata.whitebox_error)).toMatch(/chat completion from the proxy: choices/);
  });

  it('checks the sandbox tools arguments before running anything, naming the field', async () => {
    const untouched = new Proxy({} as SandboxProvider, {
      get: (_target, name) => () => {
        throw new Error(`the provider's ${String(name)} ran`);
      },
    });
    const tools = new WhiteboxToolPaddock(untouched, { sandboxId: 's' } as SandboxLease);
    await expect(tools.toolCall('shell.exec', { command: 'ls', cwd: 7 })).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining('cwd'),
    });
    await expect(tools.toolCall('file.read', { path: '' })).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining('path'),
    });
    await expect(tools.toolCall('file.read', { path: 'a', encoding: 'klingon' })).rejects.toMatchObject({
      message: expect.stringContaining('encoding'),
    });
    await expect(tools.toolCall('shell.exec', {})).rejects.toMatchObject({ code: 'invalid_argument' });
  });
});
