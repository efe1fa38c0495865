import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { qwen35ChatTemplatePath, qwenModelDirectory, temporaryDirectory } from './__fixtures__/harness.js';
import { ScriptedEngine } from './__fixtures__/scripted-engine.js';
import { ProxyClient } from './proxy-client.js';

const packageRoot = fileURLToPath(new URL('..', import.meta.url));
let engine: ScriptedEngine;
const store = temporaryDirectory();

// Starts the real CLI in a child process and resolves with its URL once it listens.
function startCli(): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    [
      '--conditions=@dressage/source',
      '--import',
      'tsx',
      'src/bin/dressage-proxy.ts',
      '--tokenizer-path',
      qwenModelDirectory,
      '--chat-template',
      qwen35ChatTemplatePath,
      '--sglang-router-url',
      engine.url,
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--store-dir',
      store.path,
      '--tool-call-parse-backend',
      'local',
      '--reasoning-parse-backend',
      'local',
      '--record-token-versions',
    ],
    { cwd: packageRoot, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  return new Promise((resolve, reject) => {
    let output = '';
    const onData = (data: Buffer) => {
      output += data.toString();
      const match = /listening on (http:\/\/\S+)/.exec(output);
      if (match) resolve({ child, url: match[1]! });
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`dressage-proxy exited with ${code}: ${output}`)));
  });
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

beforeAll(async () => {
  const { loadTokenizer } = await import('@dressage/tito');
  const tokenizer = await loadTokenizer(qwenModelDirectory);
  engine = await new ScriptedEngine({
    encode: (text) => Array.from(tokenizer.encode(text)),
    decode: (ids) => tokenizer.decode(ids),
  }).start();
});

afterAll(async () => {
  await engine?.close();
  store.remove();
});

describe('restart persistence (real child process)', () => {
  it('finalized, unread trajectories survive a SIGKILL and read back intact', async () => {
    engine.script = (_request, index) => ({ text: `answer number ${index}<|im_end|>` });
    const first = await startCli();
    let before: unknown[] = [];
    try {
      const client = new ProxyClient({ baseUrl: first.url });
      for (const session of ['r1', 'r2', 'r3']) {
        await client.chatCompletions(
          { messages: [{ role: 'user', content: `task ${session}` }] },
          { sessionId: session, instanceId: 'g' },
        );
        await client.finalizeSession(session, { label: { score: 1 } });
      }
      const drained = await client.readTrajectory({ trajectoryId: 'r1', drain: true });
      expect(drained.data).toHaveLength(1);
      before = [
        (await client.readTrajectory({ trajectoryId: 'r2' })).data,
        (await client.readTrajectory({ trajectoryId: 'r3', segmentView: 'timeline' })).data,
      ];
    } finally {
      await kill(first.child);
    }

    const second = await startCli();
    try {
      const client = new ProxyClient({ baseUrl: second.url });
      expect(await client.trajectoryStats()).toMatchObject({ total_items: 4, total_instances: 1 });
      const after = [
        (await client.readTrajectory({ trajectoryId: 'r2' })).data,
        (await client.readTrajectory({ trajectoryId: 'r3', segmentView: 'timeline' })).data,
      ];
      expect(after).toEqual(before);
      expect((await client.readTrajectory({ trajectoryId: 'r1' })).data).toEqual([]);
      // Batch mode hands out both remaining trajectories as one instance group and drains them.
      const batch = await client.readTrajectory();
      expect(batch.mode).toBe('batch');
      expect(batch.data).toHaveLength(1);
      expect((batch.data[0] as unknown[]).length).toBe(2);
      expect(await client.trajectoryStats()).toMatchObject({ total_items: 0 });
    } finally {
      await kill(second.child);
    }
    // Two CLI process starts (module load included): generous on a loaded two-core machine.
  }, 180_000);
});
