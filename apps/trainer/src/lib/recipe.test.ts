import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError, type ValidationIssue } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { minimalRecipe } from './__fixtures__/minimal-recipe.js';
import { loadRecipe, parseRecipe } from './recipe.js';

function issuePaths(run: () => unknown): string[] {
  try {
    run();
  } catch (error) {
    if (!DressageError.isInstance(error)) throw error;
    return (
      (error.details.issues as ValidationIssue[] | undefined)?.map((issue) => issue.path) ?? [error.message]
    );
  }
  throw new Error('expected an error');
}

describe('recipes', () => {
  it('fills every default of a minimal recipe', () => {
    const recipe = parseRecipe(minimalRecipe);
    expect(recipe.data).toMatchObject({
      n_samples_per_prompt: 8,
      rollout_batch_size: 8,
      input_key: 'prompt',
    });
    expect(recipe.rollout).toMatchObject({ mode: 'sync', temperature: 1, max_retries: 2 });
    expect(recipe.loss).toMatchObject({ advantage_estimator: 'grpo', eps_clip: 0.2, kl_loss_type: 'k1' });
    expect(recipe.proxy).toMatchObject({
      token_build_mode: 'tito',
      api_key: 'no-auth',
      record_token_versions: true,
      // A proxy started by a cluster recipe stays on loopback unless the recipe says otherwise.
      host: '127.0.0.1',
    });
    expect(recipe.engine.kind === 'embedded' && recipe.engine.model).toMatchObject({
      layers: 2,
      d_model: 64,
    });
    expect(recipe.warm_start.steps).toBe(0);
    expect(recipe.hooks.reward_modules).toEqual([]);
  });

  it('accepts a cluster recipe with hooks', () => {
    const recipe = parseRecipe(`
name: swe
output_dir: /runs/swe
data: { path: /data/swe.jsonl, n_samples_per_prompt: 16 }
rollout: { mode: partial-async, keep_versions: 2 }
proxy: { url: "http://10.0.0.5:8800", partial_rollout: true, max_partial_rollout_preempts: 2 }
engine: { kind: sglang, router_url: "http://10.0.0.5:8000" }
trainer: { kind: grpc, address: "10.0.0.6:50051" }
loss: { use_tis: true, eps_clip_high: 0.28 }
training: { steps: 200, global_batch_size: 128 }
hooks:
  generate: "@dressage/paddock#blackboxGenerate"
  reward_modules: [./rewards.ts]
`);
    expect(recipe.engine).toEqual({ kind: 'sglang', router_url: 'http://10.0.0.5:8000' });
    expect(recipe.trainer).toMatchObject({ kind: 'grpc', deadline_seconds: 3600 });
    expect(recipe.hooks.generate).toBe('@dressage/paddock#blackboxGenerate');
  });

  it('names the bad field', () => {
    expect(issuePaths(() => parseRecipe(minimalRecipe.replace('steps: 40', 'steps: 0')))).toEqual([
      'training.steps',
    ]);
    expect(
      issuePaths(() => parseRecipe(minimalRecipe.replace('kind: embedded\ntrainer', 'kind: vllm\ntrainer'))),
    ).toEqual(['engine.kind']);
    expect(issuePaths(() => parseRecipe(`${minimalRecipe}rollout: { mode: eventually }\n`))).toEqual([
      'rollout.mode',
    ]);
    expect(issuePaths(() => parseRecipe(`${minimalRecipe}loss: { eps_clp: 0.2 }\n`))).toEqual(['loss']);
    expect(issuePaths(() => parseRecipe(`${minimalRecipe}hooks: { generate: "a#b#c" }\n`))).toEqual([
      'hooks.generate',
    ]);
    expect(issuePaths(() => parseRecipe('name: x\n'))).toEqual([
      'output_dir',
      'data',
      'engine',
      'trainer',
      'training',
    ]);
  });

  it('reports YAML syntax errors and missing files clearly', async () => {
    expect(() => parseRecipe('name: [unclosed', 'r.yaml')).toThrow(/r\.yaml: not valid YAML/);
    await expect(loadRecipe('/nonexistent/recipe.yaml')).rejects.toMatchObject({ code: 'not_found' });
  });

  it('resolves relative paths against the recipe file', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-recipe-'));
    await writeFile(join(directory, 'recipe.yaml'), minimalRecipe);
    const loaded = await loadRecipe(join(directory, 'recipe.yaml'));
    expect(loaded.resolvePath(loaded.recipe.data.path)).toBe(join(directory, 'prompts.jsonl'));
    expect(loaded.resolvePath('/abs/file')).toBe('/abs/file');
  });

  it('continues preempted requests and corrects for stale tokens in the async modes unless told otherwise', () => {
    const sync = parseRecipe(minimalRecipe);
    expect(sync.proxy.partial_rollout).toBe(false);
    expect(sync.loss.use_tis).toBe(false);
    for (const mode of ['fully-async', 'partial-async']) {
      const recipe = parseRecipe(`${minimalRecipe}rollout: { mode: ${mode} }\n`);
      expect(recipe.proxy.partial_rollout).toBe(true);
      expect(recipe.loss.use_tis).toBe(true);
    }
    const explicit = parseRecipe(
      `${minimalRecipe}rollout: { mode: fully-async }\nloss: { use_tis: false }\n`,
    );
    expect(explicit.loss.use_tis).toBe(false);
  });

  it('takes the rollout logprobs as the old policy instead of truncated importance sampling when asked', () => {
    const recipe = parseRecipe(
      `${minimalRecipe}rollout: { mode: fully-async }\nloss: { use_rollout_logprobs: true }\n`,
    );
    expect(recipe.loss.use_rollout_logprobs).toBe(true);
    expect(recipe.loss.use_tis).toBe(false);
    expect(parseRecipe(minimalRecipe).loss.use_rollout_logprobs).toBe(false);
    const both = `${minimalRecipe}loss: { use_rollout_logprobs: true, use_tis: true }\n`;
    expect(issuePaths(() => parseRecipe(both))).toEqual(['loss.use_tis']);
  });

  it('refuses an async mode whose proxy would fail the requests a weight update preempts', () => {
    const text = `${minimalRecipe}rollout: { mode: fully-async }\nproxy: { partial_rollout: false }\n`;
    expect(issuePaths(() => parseRecipe(text))).toEqual(['proxy.partial_rollout']);
    expect(() => parseRecipe(text)).toThrow(/generation_preempted/);
  });

  it('takes the async rollout budget and recall, naming a bad value', () => {
    const text = `${minimalRecipe}rollout: { mode: fully-async, keep_versions: 2, max_active_samples: 256, max_outstanding_groups: 48, recall_stale_groups: true }\n`;
    expect(parseRecipe(text).rollout).toMatchObject({
      max_active_samples: 256,
      max_outstanding_groups: 48,
      recall_stale_groups: true,
    });
    expect(parseRecipe(minimalRecipe).rollout.recall_stale_groups).toBeUndefined();
    expect(issuePaths(() => parseRecipe(`${minimalRecipe}rollout: { max_outstanding_groups: 0 }\n`))).toEqual(
      ['rollout.max_outstanding_groups'],
    );
  });

  it('extends another recipe, overriding only what it names', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-recipe-'));
    await writeFile(join(directory, 'recipe.yaml'), `${minimalRecipe}rollout: { temperature: 0.7 }\n`);
    await writeFile(
      join(directory, 'async.yaml'),
      'extends: recipe.yaml\nname: weather-async\nrollout: { mode: fully-async, keep_versions: 2 }\n',
    );
    const { recipe } = await loadRecipe(join(directory, 'async.yaml'));
    expect(recipe.name).toBe('weather-async');
    expect(recipe.rollout).toMatchObject({ mode: 'fully-async', keep_versions: 2, temperature: 0.7 });
    expect(recipe.training.steps).toBe(40);
    expect(recipe.proxy.partial_rollout).toBe(true);
    await writeFile(join(directory, 'loop.yaml'), 'extends: loop.yaml\n');
    await expect(loadRecipe(join(directory, 'loop.yaml'))).rejects.toThrow(/extends forms a cycle/);
  });

  it('starts a Python worker for a grpc trainer beside the embedded engine, or connects to an address', () => {
    const worker = parseRecipe(
      minimalRecipe.replace(
        'kind: embedded\ntraining',
        'kind: grpc\n  worker: { worker_dir: ../../../megatron-worker }\ntraining',
      ),
    );
    expect(worker.trainer).toEqual({
      kind: 'grpc',
      deadline_seconds: 3600,
      worker: {
        python: '/usr/bin/python3',
        worker_dir: '../../../megatron-worker',
        actor: 'torch',
        processes: 1,
        threads: 0,
        args: [],
      },
    });
    expect(
      issuePaths(() =>
        parseRecipe(minimalRecipe.replace('kind: embedded\ntraining', 'kind: grpc\ntraining')),
      ),
    ).toEqual(['trainer.address']);
    const cluster = minimalRecipe
      .replace('kind: embedded\ntrainer', 'kind: sglang\n  router_url: http://127.0.0.1:8000\ntrainer')
      .replace('kind: embedded\ntraining', 'kind: grpc\n  worker: { worker_dir: w }\ntraining');
    expect(issuePaths(() => parseRecipe(cluster))).toEqual(['trainer.worker']);
  });
});

describe('blackbox recipes', () => {
  const withBlackbox = (section: string) => `${minimalRecipe}blackbox: ${section}\n`;

  it("accepts each of paddock's five adapters with its own options", () => {
    const cases = {
      opencode: '{ model_limit: { context: 4096, output: 512 } }',
      qwen_code: '{ max_session_turns: 7 }',
      claude_code: '{ max_turns: 5, system_prompt_mode: replace }',
      codex: '{ model_provider_id: local_proxy }',
      openclaw: '{ context_window: 8192, timeout_seconds: 60, proxy: { default_temperature: 0.7 } }',
    };
    for (const [agent, options] of Object.entries(cases)) {
      const recipe = parseRecipe(withBlackbox(`{ agent: ${agent}, backend_options: ${options} }`));
      expect(recipe.blackbox?.agent).toBe(agent);
      expect(Object.keys(recipe.blackbox?.backend_options ?? {}).length).toBeGreaterThan(0);
    }
  });

  it('refuses an unknown adapter and options the adapter would refuse, naming the field', () => {
    expect(issuePaths(() => parseRecipe(withBlackbox('{ agent: aider }')))).toEqual(['blackbox.agent']);
    expect(
      issuePaths(() =>
        parseRecipe(withBlackbox('{ agent: claude_code, backend_options: { max_turns: 0 } }')),
      ),
    ).toEqual(['blackbox.backend_options.max_turns']);
    // An option of another adapter: the adapter's strict schema refuses it at load time, not at register.
    expect(
      issuePaths(() => parseRecipe(withBlackbox('{ agent: codex, backend_options: { context_window: 1 } }'))),
    ).toEqual(['blackbox.backend_options']);
    expect(
      issuePaths(() =>
        parseRecipe(withBlackbox('{ agent: opencode, backend_options: { proxy: { max_steps: 3 } } }')),
      ),
    ).toEqual(['blackbox.backend_options.proxy.max_steps']);
  });
});
