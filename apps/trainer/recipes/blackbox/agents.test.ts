// `blackbox.agent` takes every adapter paddock ships (recipe.test.ts in src/lib checks all five with
// options of their own). Here each CLI other than opencode (recipe.test.ts beside this file),
// installed from npm into the agent cache and unmodified, trains a step through `dressage train`
// with an adapter option of its own. Claude Code's, qwen-code's and OpenClaw's requests (their own
// instructions and tool schemas) run to 8-16K tokens: the embedded trainer attends to them in
// chunks (one pass over 10K tokens failed with "Invalid typed array length").
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentPackages, ensureAgentInstalled } from '@dressage/paddock';
import { describe, expect, it } from 'vitest';
import { runCli } from '../../src/lib/__fixtures__/cli.js';

type Json = Record<string, unknown>;

const recipeDirectory = new URL('.', import.meta.url).pathname;

// Each CLI with an option only its adapter knows, and the context its own instructions need (with
// this recipe's system prompt, about 10K tokens for Claude Code, 16K for qwen-code, 8K for OpenClaw).
const agents = {
  codex: { options: '{ model_provider_id: local_proxy }', context: 16384, longerThan: 0 },
  claude_code: { options: '{ max_turns: 5 }', context: 32768, longerThan: 8192 },
  qwen_code: { options: '{ max_session_turns: 7 }', context: 32768, longerThan: 8192 },
  openclaw: { options: '{ context_window: 32768 }', context: 32768, longerThan: 6144 },
} as const;

async function installed(agent: keyof typeof agents): Promise<string | null> {
  try {
    // Below the test's 900 s, leaving the training step its time: a slow failing network skips.
    await ensureAgentInstalled(agentPackages[agent], { timeoutMs: 720_000 });
    return null;
  } catch (error) {
    return String(error);
  }
}

describe('blackbox agents under dressage train', () => {
  it.for(Object.keys(agents) as (keyof typeof agents)[])(
    'trains a step with %s',
    { timeout: 900_000 },
    async (agent, context) => {
      const skipReason = await installed(agent);
      if (skipReason !== null) {
        console.warn(`[dressage] skipping ${agent}: cannot install its CLI: ${skipReason}`);
        context.skip();
      }
      const { options, context: window, longerThan } = agents[agent];
      const directory = await mkdtemp(join(tmpdir(), `dressage-blackbox-${agent}-`));
      try {
        const recipePath = join(directory, 'recipe.yaml');
        await writeFile(
          recipePath,
          `name: blackbox-${agent}
seed: 11
output_dir: ${join(directory, 'run')}
data: { path: ${join(recipeDirectory, 'prompts.jsonl')}, n_samples_per_prompt: 2, rollout_batch_size: 1 }
blackbox:
  agent: ${agent}
  slots: 2
  backend_options: ${options}
  system_prompt: ${join(recipeDirectory, 'system-prompt.txt')}
  max_steps: 2
rollout: { max_new_tokens: 32, max_retries: 0 }
engine: { kind: embedded, model: { layers: 1, d_model: 32, heads: 2, context: ${window}, seed: 11 } }
proxy: { token_build_model: qwen3 }
trainer: { kind: embedded }
training: { steps: 1 }
hooks: { reward_modules: [${join(recipeDirectory, 'task.ts')}] }
`,
        );
        const { code, output } = await runCli(['train', '--recipe', recipePath]);
        expect(code, output).toBe(0);
        const { name, version } = agentPackages[agent];
        expect(output).toContain(`blackbox agents: ${name}@${version} in 2 bubblewrap sandboxes`);
        // Each sample is the CLI's own request as the proxy recorded it, and the check command ran.
        const samples = (await readFile(join(directory, 'run', 'samples', 'step-000000.jsonl'), 'utf8'))
          .trim()
          .split('\n')
          .map((line) => JSON.parse(line) as Json);
        expect(samples.length).toBeGreaterThanOrEqual(2);
        for (const sample of samples) {
          const metadata = sample.metadata as Json;
          expect(sample.remove_sample, JSON.stringify(metadata)).toBe(false);
          expect((sample.loss_mask as number[]).some((value) => value === 1)).toBe(true);
          // The CLI's request as it is: past what one pass of attention could hold.
          expect((sample.tokens as number[]).length).toBeGreaterThan(longerThan);
          const results = metadata.execute_cmds as Json[];
          expect(results.map((result) => [result.stage, result.name])).toEqual([['after_agent', 'check']]);
        }
      } finally {
        await rm(directory, { recursive: true, force: true });
      }
    },
  );
});
