// The cluster path as an operator runs it, against the stand-ins of slime and Ray: the Megatron worker
// started as `ray job submit` starts it (stdin at end of file, no terminal, a session of its own) in
// front of a router that outlives it, `dressage train` through a real proxy and the real TrainerService
// over gRPC, then the worker stopped, restarted with `--load` on its `--save`, and the run continued
// with `dressage train --resume`: the step, the prompt position and slime's weight version continue.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  buildVocabulary,
  CausalLanguageModel,
  InferenceEngine,
  initializeBackend,
  startEngineServer,
} from '@dressage/embedded';
import { createProxyConfig, startProxyServer } from '@dressage/proxy';
import { loadTokenizer } from '@dressage/tito';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultTokenizerPath } from './embedded-stack.js';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const appDirectory = join(here, '..', '..');
const weatherDirectory = join(appDirectory, 'recipes', 'weather');
const workerDirectory = join(appDirectory, '..', 'megatron-worker');

interface Started {
  child: ChildProcess;
  line: string;
  output: () => string;
}

const children: ChildProcess[] = [];

/** Starts a process with no stdin in a session of its own; resolves at its first stdout line. */
function start(args: string[], env: Record<string, string> = {}): Promise<Started> {
  const child = spawn('/usr/bin/python3', args, {
    cwd: workerDirectory,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, PYTHONUNBUFFERED: '1', ...env },
  });
  children.push(child);
  let output = '';
  return new Promise((resolve, reject) => {
    const take = (chunk: Buffer) => {
      output += chunk.toString();
      const line = output.split('\n')[0] as string;
      if (output.includes('\n') && child.stdout !== null) resolve({ child, line, output: () => output });
    };
    child.stdout?.on('data', take);
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.once('exit', (code) => reject(new Error(`${args.join(' ')} exited (${code}):\n${output}`)));
  });
}

function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });
}

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
});

/** The README's entrypoint, on loopback, with slime's flags for two training and two engine GPUs. */
function startWorker(routerPort: string, save: string, model: string): Promise<Started> {
  const slime = [
    ...['--actor-num-nodes', '1', '--actor-num-gpus-per-node', '2', '--rollout-num-gpus', '2'],
    ...[
      '--rollout-num-gpus-per-engine',
      '1',
      '--sglang-router-ip',
      '127.0.0.1',
      '--sglang-router-port',
      routerPort,
    ],
    ...['--hf-checkpoint', model, '--ref-load', model, '--load', save, '--save', save],
    ...['--disable-rollout-global-dataset', '--rollout-batch-size', '1', '--n-samples-per-prompt', '4'],
    ...['--num-rollout', '4', '--global-batch-size', '4', '--advantage-estimator', 'grpo'],
    ...['--eps-clip', '0.2', '--lr', '1e-6', '--no-check-for-nan-in-loss-and-grad'],
  ];
  return start(
    [
      '-m',
      'dressage_megatron_worker',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--actor',
      'slime',
      '--',
      ...slime,
    ],
    { PYTHONPATH: `${join(workerDirectory, 'tests', 'stand_in_site')}:${workerDirectory}` },
  );
}

describe('dressage train on the cluster path (slime and Ray stand-ins)', () => {
  it('trains, checkpoints, and resumes on a restarted worker with --resume', async () => {
    await initializeBackend({ backend: 'auto' });
    const tokenizerPath = defaultTokenizerPath();
    const tokenizer = await loadTokenizer(tokenizerPath);
    const model = CausalLanguageModel.create(
      buildVocabulary({ tokenizer, texts: ['Weather today? clear'] }),
      {
        layerCount: 1,
        modelDimension: 16,
        headCount: 2,
        contextLength: 512,
      },
    );
    const engine = new InferenceEngine({ model, weightVersion: '0' });
    // The embedded engine stands in for the SGLang engines behind the router the proxy routes to.
    const engineServer = await startEngineServer({ engine, tokenizer });
    const proxy = await startProxyServer(
      createProxyConfig({
        tokenizerPath,
        tokenBuildModel: 'qwen3',
        sglangRouterUrl: engineServer.url,
        host: '127.0.0.1',
        port: 0,
      }),
    );
    const directory = await mkdtemp(join(tmpdir(), 'dressage-cluster-'));
    const save = join(directory, 'ckpt');
    const hfModel = join(directory, 'model');
    // What --ref-load names: the model the actors start from while --save holds no checkpoint.
    await mkdir(save);
    await mkdir(hfModel);
    await writeFile(join(hfModel, 'config.json'), '{}');
    const prompts = (await readFile(join(weatherDirectory, 'prompts.jsonl'), 'utf8')).split('\n').slice(0, 4);
    await writeFile(join(directory, 'prompts.jsonl'), `${prompts.join('\n')}\n`);
    const writeRecipe = async (address: string, steps: number) => {
      const path = join(directory, 'recipe.yaml');
      await writeFile(
        path,
        `name: cluster-stand-in
seed: 3
output_dir: ${join(directory, 'run')}
tokenizer_path: ${tokenizerPath}
data: { path: prompts.jsonl, n_samples_per_prompt: 4, rollout_batch_size: 1, shuffle: false }
agent: { module: ${join(weatherDirectory, 'task.ts')}#WeatherAgent }
rollout: { mode: sync, temperature: 1.0, max_new_tokens: 6, max_retries: 1 }
proxy: { url: "${proxy.url}", token_build_model: qwen3 }
engine: { kind: sglang, router_url: "${engineServer.url}" }
trainer: { kind: grpc, address: "${address}", deadline_seconds: 120 }
loss: { learning_rate: 0.000001 }
training: { steps: ${steps}, global_batch_size: 4, checkpoint_interval: 1 }
hooks: { reward_modules: [${join(weatherDirectory, 'task.ts')}] }
`,
      );
      return path;
    };
    const router = await start(['-m', 'tests.process_stand_in', 'router']);
    const routerUrl = router.line.split(' ')[1] as string;
    const routerPort = routerUrl.slice(routerUrl.lastIndexOf(':') + 1);
    try {
      const first = await startWorker(routerPort, save, hfModel);
      expect(first.line).toMatch(/^listening on 127\.0\.0\.1:\d+$/);
      const firstAddress = `127.0.0.1:${first.line.slice(first.line.lastIndexOf(':') + 1)}`;
      const lines: string[] = [];
      const firstRun = await runTraining(await loadRecipe(await writeRecipe(firstAddress, 2)), {
        log: (line) => lines.push(line),
      });
      expect(firstRun.stepsCompleted).toBe(2);
      // slime's versions: 1 from the start's push, then one per step.
      expect(firstRun.weightVersion).toBe('3');
      const output = join(directory, 'run');
      let state = JSON.parse(await readFile(join(output, 'run-state.json'), 'utf8'));
      // The checkpoint is where Megatron wrote it (--save), for the last rollout trained.
      expect(state).toEqual({ step: 2, weight_version: '3', checkpoint: join(save, 'iter_0000001') });
      expect(await readFile(join(save, 'latest_checkpointed_iteration.txt'), 'utf8')).toBe('1');
      // A run killed after saving the data source of a later step, before its run state: the resume
      // takes the position saved with the checkpoint it resumes, not the newest one.
      const positions = join(output, 'data-source', 'rollout');
      const position = JSON.parse(
        await readFile(join(positions, 'global_dataset_state_dict_2.json'), 'utf8'),
      );
      await writeFile(
        join(positions, 'global_dataset_state_dict_3.json'),
        JSON.stringify({ ...position, sample_offset: position.sample_offset + 1 }),
      );

      // The operator stops the job (SIGTERM) and submits it again with the same flags: --load is
      // --save, which now holds a Megatron checkpoint.
      expect(await stop(first.child)).toBe(0);
      expect(JSON.parse(await (await fetch(`${routerUrl}/workers`)).text()).workers).toEqual([]);
      const second = await startWorker(routerPort, save, hfModel);
      const secondAddress = `127.0.0.1:${second.line.slice(second.line.lastIndexOf(':') + 1)}`;
      const resumed = spawn(
        process.execPath,
        [
          '--conditions=@dressage/source',
          '--import',
          'tsx',
          join(appDirectory, 'src', 'bin', 'dressage.ts'),
          'train',
          '--recipe',
          await writeRecipe(secondAddress, 4),
          '--resume',
        ],
        { cwd: appDirectory, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      children.push(resumed);
      let resumedOutput = '';
      resumed.stdout.on('data', (chunk) => {
        resumedOutput += String(chunk);
      });
      resumed.stderr.on('data', (chunk) => {
        resumedOutput += String(chunk);
      });
      const code = await new Promise((resolve) => resumed.once('exit', resolve));
      expect(code, resumedOutput).toBe(0);
      // The restarted actors continue slime's versions: 4 at their start, 5 pushed at the resume.
      expect(resumedOutput).toContain(
        `resume: step 2, checkpoint ${join(save, 'iter_0000001')} (weights 4), serving 5`,
      );
      state = JSON.parse(await readFile(join(output, 'run-state.json'), 'utf8'));
      expect(state).toEqual({ step: 4, weight_version: '7', checkpoint: join(save, 'iter_0000003') });
      expect(
        JSON.parse(await readFile(join(save, 'iter_0000003', 'dressage-checkpoint.json'), 'utf8')),
      ).toEqual({
        rollout_id: 3,
        weight_version: 7,
      });
      const records = await readMetricsLog(join(output, 'metrics.jsonl'));
      expect(records.filter((record) => record.phase === 'rl').map((record) => record.step)).toEqual([
        0, 1, 2, 3,
      ]);
      // Every published update was paused and quiesced first; nothing was preempted behind the proxy's back.
      for (const record of records.filter((item) => item.phase === 'rl')) {
        if (record.metrics['weight_update/published'] === 1)
          expect(record.metrics['weight_update/quiesced']).toBe(1);
        expect(record.metrics['proxy/unrequested_preemptions']).toBe(0);
      }
      // The prompt position continues: step k trained the k-th prompt (no shuffle, one per step).
      for (const step of [0, 1, 2, 3]) {
        const exported = (await readFile(join(output, 'samples', `step-00000${step}.jsonl`), 'utf8'))
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line));
        expect(new Set(exported.map((sample) => sample.metadata.instance_id))).toEqual(
          new Set([`weather-000${step}`]),
        );
      }
      expect(existsSync(join(output, 'checkpoints'))).toBe(false);
      expect(await stop(second.child)).toBe(0);
    } finally {
      await stop(router.child);
      await proxy.close();
      await engineServer.close();
      engine.close();
      model.dispose();
    }
  }, 600_000);
});
