// A run keeps every failed attempt in errors.jsonl (what failed, where, the sample and session, the
// error's code and message), shows them in its report and serves them to the inspector.
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startInspector } from '@dressage/inspector';
import { createSample, DressageError, SampleStatus } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { appDirectory, runCli } from './__fixtures__/cli.js';
import { ErrorLog, readErrorLog, sampleFailure } from './error-log.js';
import type { ExportedSample } from './sample-export.js';

const here = dirname(fileURLToPath(import.meta.url));
const weather = join(appDirectory, 'recipes', 'weather');

describe('errors.jsonl', () => {
  it('records a failed rollout attempt with its sample and session, in the report and the inspector', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-errors-'));
    const prompts = join(directory, 'prompts.jsonl');
    await writeFile(
      prompts,
      '{"prompt": "Weather today?", "label": "rain"}\n{"prompt": "Weather now?", "label": "snow"}\n',
    );
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      `name: errors
output_dir: ${join(directory, 'run')}
data: { path: ${prompts}, n_samples_per_prompt: 2, rollout_batch_size: 2, shuffle: false }
agent: { module: "${join(here, '__fixtures__', 'flaky-agent.ts')}#FlakyWeatherAgent" }
rollout: { max_new_tokens: 8, max_retries: 0 }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 } }
trainer: { kind: embedded }
proxy: { token_build_model: qwen3 }
training: { steps: 1 }
hooks: { reward_modules: ["${join(weather, 'task.ts')}"] }
`,
    );
    const { code, output } = await runCli(['train', '--recipe', recipePath]);
    expect(code, output).toBe(0);
    const run = join(directory, 'run');
    expect(output).toContain(`errors: 2 failed attempts recorded in ${join(run, 'errors.jsonl')}`);
    const errors = await readErrorLog(join(run, 'errors.jsonl'));
    // Both samples of the offline prompt failed, each in its own session.
    expect(errors).toHaveLength(2);
    for (const error of errors) {
      expect(error).toMatchObject({
        step: 0,
        stage: 'generate',
        where: 'whitebox agent FlakyWeatherAgent',
        retry: 0,
        code: 'unavailable',
        message: 'the weather station is offline',
        trained: false,
      });
      expect(error.session_id).toMatch(/^wb-[0-9a-f]{32}$/);
      expect(typeof error.sample_index).toBe('number');
    }
    expect(new Set(errors.map((error) => error.session_id)).size).toBe(2);
    // The failed samples train as no-gradient placeholders that name the same sessions.
    const samples = (await readFile(join(run, 'samples', 'step-000000.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as ExportedSample);
    const placeholders = samples.filter((sample) => sample.metadata.whitebox_error !== undefined);
    expect(placeholders.every((sample) => sample.remove_sample)).toBe(true);
    expect(new Set(placeholders.map((sample) => sample.metadata.last_failed_session_id))).toEqual(
      new Set(errors.map((error) => error.session_id)),
    );

    const report = await readFile(join(run, 'report.html'), 'utf8');
    expect(report).toContain('<th>errors</th><td>2 (errors.jsonl)</td>');
    expect(report).toContain('generate unavailable: 2');
    expect(report).toContain('the weather station is offline');

    const inspector = await startInspector({ run, port: 0 });
    try {
      const info = (await (await fetch(`${inspector.url}api/info`)).json()) as {
        details: { errors: number };
      };
      expect(info.details.errors).toBe(2);
      const all = (await (await fetch(`${inspector.url}api/errors`)).json()) as { total: number };
      expect(all.total).toBe(2);
      const one = (await (
        await fetch(`${inspector.url}api/errors?session=${errors[0]!.session_id}`)
      ).json()) as { items: { code: string }[] };
      expect(one.items.map((item) => item.code)).toEqual(['unavailable']);
    } finally {
      await inspector.close();
    }
  }, 300_000);

  it('records blackbox failures and harvested early stops from the samples a generate function returns', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-errors-unit-'));
    const log = new ErrorLog(join(directory, 'errors.jsonl'));
    const failed = createSample({
      index: 4,
      group_index: 2,
      status: SampleStatus.ABORTED,
      remove_sample: true,
      session_id: 'bbs-1',
      metadata: {
        instance_id: 'task-7',
        dressage_retry_count: 1,
        blackbox_agent_error_kind: 'backend_timeout',
        blackbox_failure_history: [{ session_id: 'bbs-1', reason: 'turn timed out after 600 s' }],
      },
    });
    const harvested = createSample({
      index: 5,
      session_id: 'bbs-2',
      metadata: {
        blackbox_agent_error_kind: 'context_overflow',
        blackbox_agent_error_details: { limit: 3072 },
      },
    });
    expect(sampleFailure(createSample({ index: 6 }))).toBeNull();
    const generate = log.wrapGenerate(
      async (sample) => (sample.index === 4 ? [failed] : [harvested]),
      'blackbox agent codex',
      () => 3,
    );
    await generate(createSample({ index: 4 }), {}, {} as never);
    await generate(createSample({ index: 5 }), {}, {} as never);
    const throwing = log.wrapGenerate(
      async () => {
        throw new DressageError({ code: 'deadline_exceeded', message: 'lease timed out' });
      },
      'generate hook ./gen.ts',
      () => 3,
    );
    await expect(throwing(createSample({ index: 9, session_id: 'x-9' }), {}, {} as never)).rejects.toThrow(
      'lease timed out',
    );
    await log.flush();
    const records = await readErrorLog(log.path);
    expect(records.map(({ time: _time, ...rest }) => rest)).toEqual([
      {
        step: 3,
        stage: 'generate',
        where: 'blackbox agent codex',
        sample_index: 4,
        group_index: 2,
        instance_id: 'task-7',
        session_id: 'bbs-1',
        retry: 1,
        code: 'backend_timeout',
        message: 'turn timed out after 600 s',
        trained: false,
      },
      {
        step: 3,
        stage: 'generate',
        where: 'blackbox agent codex',
        sample_index: 5,
        group_index: null,
        instance_id: null,
        session_id: 'bbs-2',
        retry: 0,
        code: 'context_overflow',
        message: `the agent's turn ended with context_overflow: {"limit":3072}`,
        trained: true,
      },
      {
        step: 3,
        stage: 'generate',
        where: 'generate hook ./gen.ts',
        sample_index: 9,
        group_index: null,
        instance_id: null,
        session_id: 'x-9',
        retry: 0,
        code: 'deadline_exceeded',
        message: 'lease timed out',
        trained: false,
      },
    ]);
  });
});
