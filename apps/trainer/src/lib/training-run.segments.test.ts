// Segment semantics through `dressage train` (runTraining on the embedded stack, loopback): the
// finish reasons of multi-segment trajectories in the exported samples, staleness control off and
// per-teacher rewards in the logged metrics, and segments from a proxy that writes numeric or null
// weight versions and null contents, all trained.

import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startProxyServer } from '@dressage/proxy';
import { describe, expect, it } from 'vitest';
import { embeddedProxyConfigOf } from './embedded-stack.js';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import type { ExportedSample } from './sample-export.js';
import { runTraining } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const fixture = join(here, '__fixtures__', 'two-turn-agent.ts');

const prompts = [
  { prompt: 'Weather in Oslo?', label: 'rain', metadata: { teacher_id: 'alpha', reward_fn: 'by_teacher' } },
  { prompt: 'Weather in Rome?', label: 'sun', metadata: { teacher_id: 'beta', reward_fn: 'by_teacher' } },
];

// A tiny recipe: two prompts, two samples each, the two-turn agent, snapshot mode (one segment per
// model request). `extra` is appended (YAML flow keys).
async function writeRecipe(directory: string, extra: string, enginePort = 0): Promise<string> {
  await writeFile(join(directory, 'prompts.jsonl'), prompts.map((line) => JSON.stringify(line)).join('\n'));
  const path = join(directory, 'recipe.yaml');
  await writeFile(
    path,
    `name: segments
output_dir: ${join(directory, 'run')}
data: { path: prompts.jsonl, n_samples_per_prompt: 2, rollout_batch_size: 2, shuffle: false }
agent: { module: "${fixture}#TwoTurnAgent" }
engine: { kind: embedded, process: shared, port: ${enginePort}, model: { layers: 1, d_model: 16, heads: 2, context: 256 }, vocabulary_texts: ["And tomorrow?"] }
trainer: { kind: embedded }
hooks: { reward_modules: ["${fixture}"] }
${extra}
`,
  );
  return path;
}

async function exported(directory: string, step: number): Promise<ExportedSample[]> {
  const text = await readFile(
    join(directory, 'run', 'samples', `step-${String(step).padStart(6, '0')}.jsonl`),
    'utf8',
  );
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => JSON.parse(line) as ExportedSample);
}

// The exported samples by trajectory, each trajectory's segments in order.
function trajectories(samples: readonly ExportedSample[]): ExportedSample[][] {
  const byTrajectory = new Map<string, ExportedSample[]>();
  for (const sample of samples) {
    const id = String(sample.trajectory_id);
    byTrajectory.set(id, [...(byTrajectory.get(id) ?? []), sample]);
  }
  return [...byTrajectory.values()].map((segments) =>
    segments.sort((a, b) => a.segment_index - b.segment_index),
  );
}

describe('segments through dressage train', () => {
  it('ends every segment but a trajectory last on segment_boundary; staleness off drops nothing; per-teacher means', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-segments-'));
    const recipePath = await writeRecipe(
      directory,
      `rollout: { mode: fully-async, max_new_tokens: 6 }
proxy: { token_build_mode: snapshot, token_build_model: qwen3 }
training: { steps: 2 }`,
    );
    const summary = await runTraining(await loadRecipe(recipePath, {}), { log: () => undefined });
    expect(summary.stepsCompleted).toBe(2);

    for (const step of [0, 1]) {
      const groups = trajectories(await exported(directory, step));
      expect(groups).toHaveLength(4);
      for (const segments of groups) {
        // Two model requests, two segments: the first continues, the last keeps the engine's reason.
        expect(segments.map((segment) => segment.segment_index)).toEqual([0, 1]);
        expect(segments[0]?.finish_reason).toBe('segment_boundary');
        expect(['stop', 'length']).toContain(segments[1]?.finish_reason);
      }
    }

    const records = (await readMetricsLog(join(directory, 'run', 'metrics.jsonl'))).filter(
      (record) => record.phase === 'rl',
    );
    expect(records).toHaveLength(2);
    for (const record of records) {
      // Staleness control off (no keep_versions): nothing tracked, nothing dropped, every group trained.
      // (`staleness/version_span_*` is the rollout's own count of versions per trajectory.)
      const tracker = Object.keys(record.metrics).filter(
        (key) => key.startsWith('staleness/') && !key.startsWith('staleness/version_span'),
      );
      expect(tracker).toEqual([]);
      expect(record.metrics['rollout/num_trajectories']).toBe(4);
      // Each teacher's trajectories' mean reward: alpha's score 1, beta's 0.
      expect(record.metrics['rollout/mopd/raw_reward_trainable_trajectory_mean/alpha']).toBe(1);
      expect(record.metrics['rollout/mopd/raw_reward_trainable_trajectory_mean/beta']).toBe(0);
    }
  }, 300_000);

  it('reports staleness when keep_versions turns the control on', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-staleness-'));
    const recipePath = await writeRecipe(
      directory,
      `rollout: { mode: fully-async, max_new_tokens: 6, keep_versions: 2 }
proxy: { token_build_mode: snapshot, token_build_model: qwen3 }
training: { steps: 1 }`,
    );
    await runTraining(await loadRecipe(recipePath, {}), { log: () => undefined });
    const [record] = (await readMetricsLog(join(directory, 'run', 'metrics.jsonl'))).filter(
      (item) => item.phase === 'rl',
    );
    expect(record?.metrics['staleness/dropped_groups']).toBe(0);
    expect(record?.metrics['staleness/current_version_index']).toBeGreaterThanOrEqual(0);
  }, 300_000);

  it('trains segments whose versions are numbers or null and whose assistant contents are null', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-foreign-'));
    const enginePort = await freePort();
    const shim = await rewritingProxy();
    const recipePath = await writeRecipe(
      directory,
      `rollout: { max_new_tokens: 6 }
proxy: { url: "${shim.url}", token_build_mode: snapshot, token_build_model: qwen3 }
training: { steps: 1 }`,
      enginePort,
    );
    const loaded = await loadRecipe(recipePath, {});
    // The proxy the recipe names, run by its user in front of the engine's port.
    const proxy = await startProxyServer({
      ...embeddedProxyConfigOf(loaded.recipe, {
        outputDirectory: join(directory, 'external'),
        resolvePath: loaded.resolvePath,
      }),
      sglangRouterUrl: `http://127.0.0.1:${enginePort}`,
    });
    shim.target = proxy.url;
    try {
      const summary = await runTraining(loaded, { log: () => undefined });
      expect(summary.stepsCompleted).toBe(1);
    } finally {
      await proxy.close();
      await shim.close();
    }
    const samples = await exported(directory, 0);
    expect(samples).toHaveLength(8);
    for (const sample of samples) {
      const original = shim.versions.get(`${sample.session_id}:${sample.segment_index}`);
      expect(original).toBeDefined();
      // Numbers stringified, null read as "unknown".
      expect(sample.full_versions).toEqual(['unknown', ...(original ?? []).slice(1)]);
      // The last assistant message says nothing, and no earlier one has text: an empty response.
      const assistants = sample.messages.filter(
        (message) => (message as { role: string }).role === 'assistant',
      );
      expect((assistants.at(-1) as { content: unknown } | undefined)?.content ?? null).toBeNull();
      expect(sample.response).toBe('');
    }
    expect(shim.rewritten).toBeGreaterThanOrEqual(8);
  }, 300_000);
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A proxy in front of a Dressage proxy that answers `/trajectory/read` as another proxy might:
 * weight versions as numbers (the first token's as null) and assistant contents null (the last)
 * or a list holding null (earlier ones). Everything else passes through unchanged.
 */
async function rewritingProxy() {
  const state = {
    target: '',
    rewritten: 0,
    /** The versions the Dressage proxy wrote, by `session:segment_index`. */
    versions: new Map<string, string[]>(),
  };
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of request) chunks.push(chunk as Buffer);
      const headers: Record<string, string> = {};
      for (const [key, value] of Object.entries(request.headers)) {
        if (typeof value === 'string' && !['host', 'content-length', 'connection'].includes(key))
          headers[key] = value;
      }
      const body = chunks.length === 0 ? undefined : Buffer.concat(chunks);
      const answer = await fetch(`${state.target}${request.url}`, {
        method: request.method ?? 'GET',
        headers,
        ...(body === undefined || request.method === 'GET' ? {} : { body }),
      });
      let text = await answer.text();
      if (request.url?.startsWith('/trajectory/read') && answer.ok) {
        const read = JSON.parse(text) as { data?: Record<string, unknown>[] };
        for (const segment of read.data ?? []) rewrite(segment);
        text = JSON.stringify(read);
      }
      response.writeHead(answer.status, {
        'content-type': answer.headers.get('content-type') ?? 'application/json',
      });
      response.end(text);
    })().catch((error: unknown) => {
      response.writeHead(502, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: String(error) }));
    });
  });
  const rewrite = (segment: Record<string, unknown>) => {
    const versions = segment.full_versions as string[];
    state.versions.set(`${segment.session_id}:${segment.segment_index}`, versions);
    segment.full_versions = versions.map((version, index) => (index === 0 ? null : Number(version)));
    const messages = segment.messages as { role: string; content: unknown }[];
    const assistants = messages.filter((message) => message.role === 'assistant');
    assistants.forEach((message, index) => {
      message.content = index === assistants.length - 1 ? null : [null];
    });
    state.rewritten++;
  };
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(state, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  });
}
