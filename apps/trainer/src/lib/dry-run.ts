import { execFile } from 'node:child_process';
import { access } from 'node:fs/promises';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { DressageError, type ErrorCode, HealthStatus } from '@dressage/protocol';
import { codeOfHttpStatus } from '@dressage/protocol/http';
import { createProxyConfig, loadPromptRendering } from '@dressage/proxy';
import { PromptDataSource } from '@dressage/schedulers';
import { createTrainerClient } from '@dressage/trainer-bridge';
import { z } from 'zod';
import { loadRecipeModules, loadRunHooks, loadRunRewards, parseHookReference } from './hooks.js';
import type { LoadedRecipe } from './recipe.js';

/** One check of a dry run. */
export interface DeploymentCheck {
  /** What was checked, e.g. `trainer: GetInfo`. */
  name: string;
  ok: boolean;
  /** What was found (versions, counts) or why it failed. */
  detail: string;
}

// What the checks read of each answer, leniently: a missing or odd field is reported by the check
// that reads it, as the deployment's fault, not as a parse failure.
const field = z.unknown().optional();
const proxyHealthSchema = z.looseObject({
  status: field,
  active_sessions: field,
  config: z
    .looseObject({ use_rollout_routing_replay: field, sglang_router_url: field })
    .optional()
    .catch(undefined),
});
const proxyCapabilitiesSchema = z.looseObject({
  token_build_mode: field,
  weight_versions_consistent: field,
  current_weight_version: field,
  partial_rollout: field,
});
const routerWorkersSchema = z.looseObject({
  workers: z
    .array(z.looseObject({ url: field, is_healthy: field }))
    .optional()
    .catch(undefined),
});
const weightVersionSchema = z.looseObject({ weight_version: field });

async function getJson<Schema extends z.ZodType>(
  url: string,
  timeoutMs: number,
  schema: Schema,
  headers: Record<string, string> = {},
): Promise<z.output<Schema>> {
  const response = await fetch(url, { headers, signal: AbortSignal.timeout(timeoutMs) });
  const text = await response.text();
  if (!response.ok) {
    throw new DressageError({
      code: codeOfHttpStatus(response.status),
      message: `HTTP ${response.status}: ${text.slice(0, 200)}`,
      details: { url, status: response.status },
    });
  }
  const parsed = schema.safeParse(JSON.parse(text));
  if (!parsed.success) {
    throw new DressageError({
      code: 'unavailable',
      message: `${url} answered ${text.slice(0, 200)}, not the JSON object it should`,
      details: { url },
    });
  }
  return parsed.data;
}

// What a check found wrong: the deployment is not ready (`failed_precondition`) or not answering
// (`unavailable`).
function failed(code: ErrorCode, message: string): DressageError {
  return new DressageError({ code, message });
}

async function check(name: string, checks: DeploymentCheck[], run: () => Promise<string>): Promise<void> {
  try {
    checks.push({ name, ok: true, detail: await run() });
  } catch (error) {
    const message = DressageError.isInstance(error)
      ? `${error.code}: ${error.message}`
      : (error as Error).message;
    checks.push({ name, ok: false, detail: message });
  }
}

/**
 * Checks a cluster deployment before any GPU time is spent: the prompt file, the recipe's modules
 * (hooks, agent, warm-start examples and reward modules, imported as a run imports them), the tokenizer, the proxy
 * (health, integration capabilities, token build mode), the SGLang router and each worker (health,
 * weight version), the trainer (reachable, serving, model limits against the recipe) and, with
 * `trainer.slime_check`, the Megatron worker's slime launch. Returns every check; none of them
 * changes state anywhere.
 */
export async function dryRun(
  loaded: LoadedRecipe,
  options: { timeoutMs?: number } = {},
): Promise<DeploymentCheck[]> {
  const { recipe } = loaded;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const checks: DeploymentCheck[] = [];

  const dataPath = loaded.resolvePath(recipe.data.path);
  await check('data: prompt file', checks, async () => {
    await access(dataPath);
    const source = await PromptDataSource.fromJsonl(dataPath, {
      inputKey: recipe.data.input_key,
      labelKey: recipe.data.label_key,
      metadataKey: recipe.data.metadata_key,
      validateOnOpen: true,
    });
    if (source.size === 0) throw failed('failed_precondition', `${dataPath} has no prompts`);
    return `${source.size} prompts, every line valid`;
  });

  // What a run imports first: a module that does not load would end the run before its first step.
  const references = [
    ...Object.values(recipe.hooks).filter((value): value is string => typeof value === 'string'),
    ...recipe.hooks.reward_modules,
    ...(recipe.agent?.module === undefined ? [] : [recipe.agent.module]),
    ...(recipe.warm_start.examples === undefined ? [] : [recipe.warm_start.examples]),
  ];
  const modules = [...new Set(references.map((reference) => parseHookReference(reference).module))];
  if (modules.length > 0) {
    await check('recipe modules', checks, async () => {
      const baseDirectory = resolve(loaded.path, '..');
      await loadRunHooks(recipe, baseDirectory);
      await loadRecipeModules(recipe, baseDirectory);
      await loadRunRewards(recipe, baseDirectory);
      return `${modules.length} loaded: ${modules.join(', ')}`;
    });
  }

  if (recipe.tokenizer_path !== undefined) {
    const tokenizerPath = loaded.resolvePath(recipe.tokenizer_path);
    await check('tokenizer', checks, async () => {
      // What a proxy started from this recipe loads: it refuses a family that cannot reproduce the
      // template in force, and so does this check.
      const { templateSource } = await loadPromptRendering(
        createProxyConfig({
          tokenizerPath,
          chatTemplate:
            recipe.proxy.chat_template === undefined ? null : loaded.resolvePath(recipe.proxy.chat_template),
          tokenBuildMode: recipe.proxy.token_build_mode,
          tokenBuildModel: recipe.proxy.token_build_model,
        }),
      );
      return `${tokenizerPath}: ${recipe.proxy.token_build_model} renders the chat template ${templateSource}`;
    });
  }

  if (recipe.proxy.url !== undefined) await proxyChecks(recipe, recipe.proxy.url, timeoutMs, checks);
  if (recipe.engine.kind === 'sglang') await engineChecks(recipe.engine.router_url, timeoutMs, checks);

  // A worker the app starts (trainer.worker) is not running yet: nothing to reach.
  if (recipe.trainer.kind === 'grpc' && recipe.trainer.address !== undefined) {
    const client = createTrainerClient(recipe.trainer.address, { deadlineMs: timeoutMs });
    try {
      await check('trainer: GetInfo', checks, async () => {
        const info = await client.getInfo();
        const longest = recipe.proxy.context_window ?? 0;
        if (longest > 0 && info.max_tokens_per_sample > 0 && longest > info.max_tokens_per_sample) {
          throw failed(
            'failed_precondition',
            `the proxy context window ${longest} exceeds the trainer's max_tokens_per_sample ${info.max_tokens_per_sample}`,
          );
        }
        return `${info.trainer_kind} ${info.model_name} on ${info.backend}, weight version ${info.weight_version}, vocabulary ${info.vocab_size}, ≤ ${info.max_tokens_per_sample} tokens per sample`;
      });
      await check('trainer: health', checks, async () => {
        const health = await client.health();
        if (health.status !== HealthStatus.STATUS_SERVING && health.status !== HealthStatus.STATUS_BUSY) {
          throw failed('unavailable', `status ${health.status}: ${health.message}`);
        }
        return health.status === HealthStatus.STATUS_BUSY ? 'busy' : 'serving';
      });
    } finally {
      client.close();
    }
    const slime = slimeCheckCommandOf(loaded);
    if (slime !== null) checks.push(...(await slimeChecks(slime, timeoutMs)));
  }
  return checks;
}

/**
 * The command of `trainer.slime_check`: its `python` running the worker's dry run, with the router
 * to probe and its `args` after `--` (run in its `worker_dir`).
 */
export function slimeCheckCommandOf(loaded: LoadedRecipe): { command: string[]; cwd: string } | null {
  const { recipe } = loaded;
  if (recipe.trainer.kind !== 'grpc' || recipe.trainer.slime_check === undefined) return null;
  const check = recipe.trainer.slime_check;
  const router = recipe.engine.kind === 'sglang' ? ['--router-url', recipe.engine.router_url] : [];
  return {
    command: [check.python, '-m', 'dressage_megatron_worker', '--dry-run', ...router, '--', ...check.args],
    cwd: loaded.resolvePath(check.worker_dir),
  };
}

/**
 * The Megatron worker's own dry run (`python -m dressage_megatron_worker --dry-run`): one JSON
 * check per line, which it prints before exiting 1 when any failed.
 */
async function slimeChecks(
  { command, cwd }: { command: string[]; cwd: string },
  timeoutMs: number,
): Promise<DeploymentCheck[]> {
  let stdout: string;
  try {
    ({ stdout } = await promisify(execFile)(command[0] as string, command.slice(1), {
      cwd,
      timeout: timeoutMs * 6,
    }));
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; message: string };
    if (!failed.stdout?.trim()) {
      return [
        { name: 'slime: dry run', ok: false, detail: (failed.stderr?.trim() || failed.message).slice(-400) },
      ];
    }
    stdout = failed.stdout;
  }
  return stdout
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as DeploymentCheck);
}

/** Renders checks as aligned lines, `ok` / `FAIL` first. */
export function formatChecks(checks: readonly DeploymentCheck[]): string {
  const width = Math.max(...checks.map((item) => item.name.length));
  return checks
    .map((item) => `${item.ok ? 'ok  ' : 'FAIL'}  ${item.name.padEnd(width)}  ${item.detail}`)
    .join('\n');
}

// The proxy: healthy, recording routed experts when training replays them, building tokens the
// recipe's way over engines of one weight version.
async function proxyChecks(
  recipe: LoadedRecipe['recipe'],
  url: string,
  timeoutMs: number,
  checks: DeploymentCheck[],
): Promise<void> {
  const proxyHeaders: Record<string, string> =
    recipe.proxy.api_key === 'no-auth' ? {} : { authorization: `Bearer ${recipe.proxy.api_key}` };
  const proxyUrl = url.replace(/\/+$/, '');
  await check('proxy: health', checks, async () => {
    const health = await getJson(`${proxyUrl}/health`, timeoutMs, proxyHealthSchema);
    if (health.status !== 'ok') throw failed('unavailable', `status ${String(health.status)}`);
    const config = health.config ?? {};
    if (recipe.training.routing_replay !== undefined && config.use_rollout_routing_replay !== true) {
      throw failed(
        'failed_precondition',
        'training.routing_replay needs the routed experts the proxy records, and this proxy was started ' +
          'without --use-rollout-routing-replay',
      );
    }
    return `ok, router ${String(config.sglang_router_url)}, ${String(health.active_sessions)} active sessions`;
  });
  await check('proxy: integration capabilities', checks, async () => {
    const capabilities = await getJson(
      `${proxyUrl}/integration/capabilities`,
      timeoutMs,
      proxyCapabilitiesSchema,
      proxyHeaders,
    );
    if (capabilities.token_build_mode !== recipe.proxy.token_build_mode) {
      throw failed(
        'failed_precondition',
        `token_build_mode is ${String(capabilities.token_build_mode)}, the recipe wants ${recipe.proxy.token_build_mode}`,
      );
    }
    if (capabilities.weight_versions_consistent === false)
      throw failed('failed_precondition', 'the engines serve different weight versions');
    return `${String(capabilities.token_build_mode)}, weight version ${String(capabilities.current_weight_version)}, partial rollout ${String(capabilities.partial_rollout)}`;
  });
}

// The SGLang router: healthy workers behind it, all serving one weight version.
async function engineChecks(routerUrl: string, timeoutMs: number, checks: DeploymentCheck[]): Promise<void> {
  let engineVersions: string[] = [];
  const router = routerUrl.replace(/\/+$/, '');
  await check('engine: router workers', checks, async () => {
    const listing = await getJson(`${router}/workers`, timeoutMs, routerWorkersSchema);
    const workers = listing.workers ?? [];
    const healthy = workers.filter((worker) => worker.is_healthy !== false);
    if (healthy.length === 0) throw failed('unavailable', `no healthy worker behind ${router}`);
    const versions: string[] = [];
    for (const worker of healthy) {
      const url = String(worker.url).replace(/\/+$/, '');
      await getJson(`${url}/health`, timeoutMs, z.unknown()).catch(async () => {
        // SGLang answers /health with an empty 200 body on some versions.
        const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(timeoutMs) });
        if (!response.ok) throw failed('unavailable', `${url}/health answered ${response.status}`);
      });
      const version = await getJson(`${url}/get_weight_version`, timeoutMs, weightVersionSchema);
      versions.push(String(version.weight_version));
    }
    engineVersions = versions;
    return `${healthy.length} healthy of ${workers.length}, weight versions ${[...new Set(versions)].join(', ')}`;
  });
  await check('engine: consistent weight versions', checks, async () => {
    const distinct = new Set(engineVersions);
    if (distinct.size > 1) throw failed('failed_precondition', `workers serve ${[...distinct].join(', ')}`);
    return distinct.size === 1 ? `all ${[...distinct][0]}` : 'no worker answered';
  });
}
