// A recipe's PaddockWhiteboxAgent gets sandboxes under `dressage train`: its toolbox's sandbox tools
// run in network-less bubblewrap slots, and a bad call comes back as a message, not an exception.
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { conditions } from '../../recipes/weather/task.js';
import { appDirectory, runCli } from './__fixtures__/cli.js';
import type { ExportedSample } from './sample-export.js';

const here = dirname(fileURLToPath(import.meta.url));
const weather = join(appDirectory, 'recipes', 'weather');

describe('whitebox sandboxes under dressage train', () => {
  it('runs a PaddockWhiteboxAgent with sandbox tools in bubblewrap slots', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'dressage-sandbox-agent-'));
    const recipe = (agent: string, extra = '') => `name: sandbox-agent
output_dir: ${join(directory, 'run')}
data: { path: ${join(weather, 'prompts.jsonl')}, n_samples_per_prompt: 2, rollout_batch_size: 2 }
agent: { module: "${agent}"${extra} }
rollout: { max_new_tokens: 8, max_retries: 0 }
engine: { kind: embedded, model: { layers: 1, d_model: 16, heads: 2, context: 256 } }
trainer: { kind: embedded }
proxy: { token_build_model: qwen3 }
training: { steps: 1 }
hooks: { reward_modules: ["${join(weather, 'task.ts')}"] }
`;
    const recipePath = join(directory, 'recipe.yaml');
    await writeFile(
      recipePath,
      recipe(`${join(here, '__fixtures__', 'sandbox-agent.ts')}#SandboxWeatherAgent`, ', sandbox_slots: 2'),
    );
    const { code, output } = await runCli(['train', '--recipe', recipePath]);
    expect(code, output).toBe(0);
    expect(output).toContain('whitebox sandboxes: 2 bubblewrap sandboxes without network');
    const samples = (await readFile(join(directory, 'run', 'samples', 'step-000000.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as ExportedSample);
    expect(samples.length).toBeGreaterThanOrEqual(4);
    for (const sample of samples) {
      expect(sample.remove_sample, JSON.stringify(sample.metadata)).toBe(false);
      const sandbox = sample.metadata.sandbox as { written: string; read: string; bad: string };
      // The file written in the slot holds the episode's weather; the slot has its own hostname.
      const [condition, hostname] = sandbox.read.split('\n');
      expect(conditions).toContain(condition);
      expect(sample.metadata.weather as { called_tool: boolean }).toBeDefined();
      expect(hostname).toMatch(/^dressage-/);
      expect(sandbox.bad).toMatch(/^Error: invalid arguments for file_read: path: /);
    }

    // The setting is refused for an agent without a sandbox.
    await writeFile(recipePath, recipe(`${join(weather, 'task.ts')}#WeatherAgent`, ', sandbox_slots: 2'));
    const refused = await runCli(['train', '--recipe', recipePath]);
    expect(refused.code).not.toBe(0);
    expect(refused.output).toContain('agent.sandbox_slots is set, but');
  }, 300_000);
});
