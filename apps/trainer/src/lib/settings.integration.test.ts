// Recipe settings that act where segments become samples and samples become a batch, each seen
// arriving there in a real (tiny) `dressage train` run: the token cap, the longest trained
// sequence and the proxy's masking of older weight versions.
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { readMetricsLog } from './metrics-log.js';
import { loadRecipe } from './recipe.js';
import { runTraining } from './training-run.js';

const here = dirname(fileURLToPath(import.meta.url));
const weather = join(here, '..', '..', 'recipes', 'weather');
const probe = join(here, '__fixtures__', 'settings-probe.ts');

// A one-step run of the weather agent (prompts of about 125 tokens, answers of up to 16) whose
// convert hook and rollout log report what reached the conversion.
async function probeRun(extra: string): Promise<{ metrics: Record<string, number>; output: string }> {
  const directory = await mkdtemp(join(tmpdir(), 'dressage-settings-'));
  const path = join(directory, 'recipe.yaml');
  await writeFile(
    path,
    `name: settings
output_dir: ${join(directory, 'run')}
data: { path: ${join(weather, 'prompts.jsonl')}, n_samples_per_prompt: 2, rollout_batch_size: 2 }
agent: { module: "${join(weather, 'task.ts')}#WeatherAgent" }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 } }
trainer: { kind: embedded }
hooks:
  convert: "${probe}#convert"
  rollout_log_function: "${probe}#rolloutLog"
  reward_modules: ["${join(weather, 'task.ts')}"]
${extra}`,
  );
  await runTraining(await loadRecipe(path, {}), { log: () => undefined });
  const records = await readMetricsLog(join(directory, 'run', 'metrics.jsonl'));
  return { metrics: records.at(-1)?.metrics ?? {}, output: join(directory, 'run') };
}

describe('recipe settings reach the conversion', () => {
  it('caps segments, cuts trained sequences and masks older versions as the recipe says', async () => {
    // Greedy decoding of the seeded model: the same answers every run, long enough to pass the cap
    // (sampled ones were sometimes all shorter than the cap's 7 tokens above the prompt).
    const { metrics, output } = await probeRun(`rollout: { max_new_tokens: 16, temperature: 0 }
proxy: { token_build_model: qwen3, mask_nonlast_version_tokens: true }
training:
  steps: 1
  max_tokens_per_gpu: 66
  context_parallel_size: 2
  max_sequence_length: 128
`);
    expect(metrics['probe/live_samples']).toBeGreaterThan(0);
    // The token cap is max_tokens_per_gpu × context_parallel_size, applied at expansion.
    expect(metrics['probe/longest_input']).toBe(132);
    expect(metrics['probe/capped_inputs']).toBe(metrics['probe/live_samples']);
    // The conversion cut every sample to max_sequence_length and marked it truncated.
    expect(metrics['probe/longest_trained']).toBe(128);
    expect(metrics['probe/truncated_trained']).toBeGreaterThanOrEqual(
      metrics['probe/capped_inputs'] as number,
    );
    // The embedded proxy was started with --mask-nonlast-version-tokens.
    expect(metrics['probe/mask_nonlast_segments']).toBe(metrics['probe/live_samples']);
    // The exported samples are what was trained: cut alike, with the trainer's logprobs beside them.
    const exported = (await readFile(join(output, 'samples', 'step-000000.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    const trainer = (await readFile(join(output, 'samples', 'step-000000.trainer.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(trainer).toHaveLength(exported.length);
    for (const [index, sample] of exported.entries()) {
      expect(sample.tokens.length).toBeLessThanOrEqual(128);
      expect(sample.loss_mask).toHaveLength(sample.tokens.length - sample.prompt_length);
      if (sample.full_versions !== null) expect(sample.full_versions).toHaveLength(sample.tokens.length);
      expect(trainer[index].train_log_probs).toHaveLength(sample.loss_mask.length);
    }
  }, 300_000);

  it('leaves samples whole without the settings', async () => {
    // Greedy, as above: the same samples that pass the cap there must pass 132 tokens here, whole
    // (sampled answers were sometimes all short enough to stay under it).
    const { metrics } = await probeRun(`rollout: { max_new_tokens: 16, temperature: 0 }
proxy: { token_build_model: qwen3 }
training: { steps: 1 }
`);
    expect(metrics['probe/capped_inputs']).toBe(0);
    expect(metrics['probe/longest_trained']).toBe(metrics['probe/longest_input']);
    expect(metrics['probe/longest_input']).toBeGreaterThan(132);
    expect(metrics['probe/mask_nonlast_segments']).toBe(0);
  }, 300_000);
});

describe('recipe settings reach the run', () => {
  it('bounds whitebox turns, spaces weight updates and reports, and binds the proxy where told', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-settings-'));
    const output = join(directory, 'run');
    const path = join(directory, 'recipe.yaml');
    await writeFile(
      path,
      `name: settings
output_dir: ${output}
data: { path: ${join(weather, 'prompts.jsonl')}, n_samples_per_prompt: 2, rollout_batch_size: 1 }
agent: { module: "${probe}#AskUntilRefused" }
rollout: { max_new_tokens: 4, max_turns: 2, update_weights_interval: 2 }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 } }
trainer: { kind: embedded }
proxy: { token_build_model: qwen3, host: 127.0.0.2 }
training: { steps: 2, report_interval: 1 }
hooks:
  convert: "${probe}#convert"
  rollout_log_function: "${probe}#runLog"
  reward_modules: ["${join(weather, 'task.ts')}"]
`,
    );
    const lines: string[] = [];
    process.env.DRESSAGE_SETTINGS_PROBE_REPORT = join(output, 'report.html');
    try {
      const summary = await runTraining(await loadRecipe(path, {}), { log: (line) => lines.push(line) });
      // One update, after the second step: the engine serves version 1, not 2.
      expect(summary.weightVersion).toBe('1');
    } finally {
      delete process.env.DRESSAGE_SETTINGS_PROBE_REPORT;
    }
    const rl = (await readMetricsLog(join(output, 'metrics.jsonl'))).filter(
      (record) => record.phase === 'rl',
    );
    expect(rl.map((record) => record.metrics['weight_update/published'])).toEqual([0, 1]);
    // Every run asked twice, then context.chat refused (each of its samples says so).
    for (const record of rl) {
      expect(record.metrics['probe/most_turns']).toBe(2);
      expect(record.metrics['probe/samples']).toBeGreaterThanOrEqual(2);
      expect(record.metrics['probe/refused_samples']).toBe(record.metrics['probe/samples']);
    }
    // The report of step 0 was on disk when step 1 was logged.
    expect(rl.map((record) => record.metrics['probe/report_written'])).toEqual([0, 1]);
    expect(lines.some((line) => line.includes('proxy http://127.0.0.2:'))).toBe(true);
  }, 300_000);
});
