import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ScriptAgentAdapter } from '../__fixtures__/script-agent.js';
import { type Script, ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { BlackboxServer } from '../blackbox/server.js';
import { BlackboxCallError, BlackboxClient } from './blackbox-client.js';

const script: Script = () => ({ content: 'done' });

// A server answering every call with one fixed status and body: a BlackboxServer cannot be made to
// answer a body of the wrong shape, or an error without its envelope.
async function fixedAnswer(status: number, body: string): Promise<{ url: string; server: Server }> {
  const server = createServer((_request, response) => {
    response.writeHead(status, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

async function failure(run: () => Promise<unknown>): Promise<DressageError> {
  try {
    await run();
  } catch (error) {
    if (DressageError.isInstance(error)) return error;
    throw error;
  }
  throw new Error('expected a failure');
}

describe('BlackboxClient', () => {
  let model: ScriptedModelServer;
  let workDir: string;
  let blackbox: BlackboxServer;
  let url: string;

  beforeAll(async () => {
    model = new ScriptedModelServer(script);
    await model.start();
    workDir = mkdtempSync(join(tmpdir(), 'paddock-client-'));
    blackbox = new BlackboxServer({
      config: {
        host: '127.0.0.1',
        port: 0,
        runtime_root: join(workDir, 'rt'),
        runtime_health_check_retries: 0,
        inside_sandbox: true,
      },
      workDir,
      adapters: { script_agent: () => new ScriptAgentAdapter() },
    });
    url = await blackbox.listen();
  });
  afterAll(async () => {
    await blackbox.close();
    await model.close();
    rmSync(workDir, { recursive: true, force: true });
  });

  it('returns the typed answers of a real BlackboxServer', async () => {
    const client = new BlackboxClient(url, { maxAttempts: 1 });
    const registered = await client.register({
      blackbox_type: 'script_agent',
      router: model.url,
      bound_session_id: 'session-1',
      bound_instance_id: 'instance-1',
    });
    expect(registered.status).toBe('ready');
    expect(registered.binding?.bound_session_id).toBe('session-1');
    expect(registered.capabilities.chat).toBe(true);

    const turn = await client.callAgent('session-1', [{ role: 'user', content: 'say done' }], {
      turnId: 'turn-1',
    });
    expect(turn.status).toBe('committed');
    expect(turn.outputs?.findLast((message) => message.role === 'assistant')?.content).toBe('done');

    const command = await client.executeCommand('session-1', 'echo typed');
    expect(command.stdout).toBe('typed\n');
    expect(command.returncode).toBe(0);
    expect(command.timed_out).toBe(false);
  });

  it('rejects an answer of the wrong shape, naming the path and field', async () => {
    const fake = await fixedAnswer(200, JSON.stringify({ session_id: 's', stdout: 42 }));
    try {
      const error = await failure(() => new BlackboxClient(fake.url).executeCommand('s', 'true'));
      expect(error).not.toBeInstanceOf(BlackboxCallError);
      expect(error.code).toBe('internal');
      expect(error.message).toContain('/v1/sessions/s/execute_cmd answered a body of the wrong shape');
      expect(error.message).toContain('stdout');
    } finally {
      fake.server.close();
    }
  });

  it('names an error answered without an envelope by its status', async () => {
    const fake = await fixedAnswer(502, '<html>bad gateway</html>');
    try {
      const error = await failure(() => new BlackboxClient(fake.url).executeCommand('s', 'true'));
      expect(error).toBeInstanceOf(BlackboxCallError);
      expect((error as BlackboxCallError).status).toBe(502);
      expect((error as BlackboxCallError).error).toBe('http_502');
    } finally {
      fake.server.close();
    }
  });
});
