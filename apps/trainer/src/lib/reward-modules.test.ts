// `dressage train` scores with reward modules of all three styles (an exported `rewards` object, an
// exported `register(registry)`, `registerReward` called on import), and every reward function
// reads the run's settings, frozen, as `args`.
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { appDirectory, runCli } from './__fixtures__/cli.js';
import type { ExportedSample } from './sample-export.js';

const here = dirname(fileURLToPath(import.meta.url));
const styles = join(here, '__fixtures__', 'reward-styles');
const task = join(appDirectory, 'recipes', 'weather', 'task.ts');

describe('reward modules under dressage train', () => {
  it('finds rewards of every module style and passes them the run settings', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-reward-styles-'));
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      `name: reward-styles
seed: 11
output_dir: ${join(directory, 'run')}
data: { path: ${join(styles, 'prompts.jsonl')}, n_samples_per_prompt: 2, rollout_batch_size: 3, shuffle: false }
agent: { module: "${task}#WeatherAgent" }
rollout: { max_new_tokens: 8 }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 } }
trainer: { kind: embedded }
proxy: { token_build_model: qwen3 }
training: { steps: 1 }
hooks:
  reward_modules: ["${join(styles, 'exported.ts')}", "${join(styles, 'registering.ts')}", "${join(styles, 'on-import.ts')}"]
`,
    );
    const { code, output } = await runCli(['train', '--recipe', recipePath]);
    expect(code, output).toBe(0);
    const samples = (await readFile(join(directory, 'run', 'samples', 'step-000000.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as ExportedSample);
    const expected: Record<string, number> = {
      exported_style: 0.11,
      register_style: 0.5,
      import_style: 0.75,
    };
    // Each trajectory's last segment (the anchor) holds its reward function's score.
    const anchors = new Map<string, ExportedSample>();
    for (const sample of samples) {
      const previous = anchors.get(String(sample.trajectory_id));
      if (previous === undefined || sample.segment_index > previous.segment_index)
        anchors.set(String(sample.trajectory_id), sample);
    }
    const scored = [...anchors.values()].filter((sample) => !sample.remove_sample);
    expect(new Set(scored.map((sample) => sample.metadata.reward_fn))).toEqual(
      new Set(Object.keys(expected)),
    );
    for (const sample of scored) expect(sample.reward).toBe(expected[String(sample.metadata.reward_fn)]);
  }, 300_000);
});
