import { isAbsolute, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DressageError, type ToolMessage } from '@dressage/protocol';
import { detailError } from './http-error.js';
import type { ExtractedToolCall } from './parsers.js';

/**
 * Where a hook runs: `after` when a request ends with tool results (the previous step's tools ran in the
 * sandbox), `before` when the model's reply carries tool calls (the agent is about to run them).
 */
export type ToolCallHookStage = 'before' | 'after';

/** What a hook is handed for one dispatch. */
export interface ToolCallHookContext {
  readonly stage: ToolCallHookStage;
  readonly sessionId: string;
  readonly instanceId: string;
  /** The provider's sandbox id (`X-Dressage-Sandbox-Id`, else body `sandbox_id`). */
  readonly sandboxId: string;
  /** The resolved turn id (implicit sessions carry their synthetic `__implicit_turn__:` id). */
  readonly turnId: string | null;
  /** Index the step of this request gets in its session (0-based). */
  readonly stepIndex: number;
  /** `"{session}:{turn|-}:{step_index}:{stage}"`: the same for a retried request. */
  readonly idempotencyKey: string;
  /** `before`: the tool calls parsed from the model's reply; `after`: null. */
  readonly toolCalls: readonly ExtractedToolCall[] | null;
  /** `after`: the trailing `tool` messages of the request; `before`: null. */
  readonly toolMessages: readonly ToolMessage[] | null;
  /** Aborted when the hook times out or the agent's request goes away. */
  readonly signal: AbortSignal;
}

/**
 * A side effect around the agent's tool execution, e.g. snapshotting the sandbox after tools ran or
 * opening its network before they run. Whatever `run` returns (JSON-able; `undefined` for nothing) is
 * recorded with the step under the hook's name and stage.
 *
 * @example
 * ```ts
 * const snapshot: ToolCallHook = {
 *   name: 'sandbox-snapshot',
 *   stages: ['after'],
 *   required: true,
 *   async run({ sandboxId, idempotencyKey, signal }) {
 *     const { id } = await sandboxes.snapshot(sandboxId, { idempotencyKey, signal });
 *     return { snapshot_id: id };
 *   },
 * };
 * ```
 */
export interface ToolCallHook {
  /** Unique among the proxy's hooks; the key of its output in the step's metadata. */
  readonly name: string;
  /** The stages the hook runs at. */
  readonly stages: readonly ToolCallHookStage[];
  /** A failure or timeout of a required hook fails the request with 502 `tool_call_hook_failed`. Default false. */
  readonly required?: boolean;
  /** Timeout of one run in seconds; default `--tool-call-hook-before-timeout` at `before`, none at `after`. */
  readonly timeoutSeconds?: number;
  run(context: ToolCallHookContext): unknown;
}

/** One entry of `extra_info.tool_call_hooks.tool_call_hook_failures`. */
export interface ToolCallHookFailure {
  hook: string;
  stage: ToolCallHookStage;
  required: boolean;
  error: { type: string; message: string };
  timed_out?: true;
  timeout_seconds?: number;
}

/** The metadata key optional hook failures are listed under. */
export const TOOL_CALL_HOOK_FAILURES_KEY = 'tool_call_hook_failures';

/** Per-session results of finished dispatches, by idempotency key, then hook name. */
export type ToolCallHookResults = Map<string, Map<string, HookOutcome>>;

interface HookOutcome {
  output: unknown;
  failure: ToolCallHookFailure | null;
}

/** The builder of idempotency keys (§1.10): `"{session}:{turn|-}:{step_index}:{stage}"`. */
export function toolCallIdempotencyKey(
  sessionId: string,
  turnId: string | null,
  stepIndex: number,
  stage: ToolCallHookStage,
): string {
  return `${sessionId}:${turnId || '-'}:${stepIndex}:${stage}`;
}

function invalidHook(message: string, cause?: unknown): DressageError {
  return new DressageError({
    code: 'invalid_argument',
    message: `--tool-call-hooks: ${message}`,
    details: { flag: 'tool-call-hooks' },
    cause,
  });
}

/**
 * Checks a hook's shape (name, stages, run, timeout) and returns it.
 *
 * @throws DressageError `invalid_argument` describing what is wrong.
 */
export function validateToolCallHook(value: unknown, origin = 'hook'): ToolCallHook {
  const hook = value as Partial<ToolCallHook> | null;
  if (typeof hook !== 'object' || hook === null)
    throw invalidHook(`${origin} is not a hook object (got ${typeof value})`);
  if (typeof hook.name !== 'string' || hook.name.trim() === '')
    throw invalidHook(`${origin} needs a non-empty string name`);
  if (hook.name === TOOL_CALL_HOOK_FAILURES_KEY)
    throw invalidHook(`${origin}: the name ${TOOL_CALL_HOOK_FAILURES_KEY} is reserved`);
  if (
    !Array.isArray(hook.stages) ||
    hook.stages.length === 0 ||
    !hook.stages.every((stage) => stage === 'before' || stage === 'after')
  )
    throw invalidHook(`hook ${hook.name}: stages must be a non-empty list of "before" and "after"`);
  if (typeof hook.run !== 'function') throw invalidHook(`hook ${hook.name}: run must be a function`);
  if (hook.required !== undefined && typeof hook.required !== 'boolean')
    throw invalidHook(`hook ${hook.name}: required must be a boolean`);
  const timeout = hook.timeoutSeconds;
  if (timeout !== undefined && !(typeof timeout === 'number' && Number.isFinite(timeout) && timeout > 0))
    throw invalidHook(`hook ${hook.name}: timeoutSeconds must be a positive number`);
  return hook as ToolCallHook;
}

// `path/to/hooks.js:exportName` (the reference's `module:Name` form) or `path/to/hooks.js#exportName`;
// without a name the module's default export. A drive letter (`C:\…`) is not a separator.
function splitReference(reference: string): { module: string; exportName: string } {
  const hash = reference.lastIndexOf('#');
  if (hash > 0) return { module: reference.slice(0, hash), exportName: reference.slice(hash + 1) };
  const colon = reference.lastIndexOf(':');
  const tail = reference.slice(colon + 1);
  if (colon > 1 && /^[A-Za-z_$][\w$]*$/.test(tail))
    return { module: reference.slice(0, colon), exportName: tail };
  return { module: reference, exportName: 'default' };
}

function moduleUrl(specifier: string, cwd: string): string {
  if (specifier.startsWith('file:')) return specifier;
  const looksLikePath =
    specifier.startsWith('.') ||
    isAbsolute(specifier) ||
    /\.(?:[cm]?js|[cm]?ts)$/.test(specifier) ||
    specifier.includes('\\');
  return looksLikePath ? pathToFileURL(resolve(cwd, specifier)).href : specifier;
}

/**
 * Imports the hooks named by `--tool-call-hooks` entries. An entry is `MODULE[:EXPORT]` (or
 * `MODULE#EXPORT`): a file path (relative to `cwd`) or a package specifier, and an export that is a
 * hook, an array of hooks, or a function returning either (possibly async). Entries may also be
 * comma- or space-separated lists.
 *
 * @throws DressageError `invalid_argument` for a missing module or export, or an invalid hook.
 */
export async function loadToolCallHooks(
  references: readonly string[],
  cwd: string = process.cwd(),
): Promise<ToolCallHook[]> {
  const hooks: ToolCallHook[] = [];
  for (const reference of references.flatMap((entry) => entry.split(/[\s,]+/)).filter(Boolean)) {
    const { module, exportName } = splitReference(reference);
    let namespace: object;
    try {
      namespace = await import(moduleUrl(module, cwd));
    } catch (error) {
      throw invalidHook(`cannot import ${JSON.stringify(module)}: ${(error as Error).message}`, error);
    }
    if (!(exportName in namespace))
      throw invalidHook(`${JSON.stringify(module)} has no export ${JSON.stringify(exportName)}`);
    let value: unknown = Reflect.get(namespace, exportName);
    if (typeof value === 'function') value = await (value as () => unknown)();
    const list = Array.isArray(value) ? value : [value];
    list.forEach((item, index) => {
      const origin = list.length > 1 ? `${reference}[${index}]` : reference;
      hooks.push(validateToolCallHook(item, origin));
    });
  }
  return hooks;
}

class HookTimeout extends Error {
  constructor(seconds: number) {
    super(`timed out after ${seconds}s`);
    this.name = 'TimeoutError';
  }
}

/** Where a dispatch writes: the step's hook metadata, created on first write. */
export interface HookMetadataSink {
  metadata: Record<string, unknown> | null;
}

/** What a dispatch needs besides the stage payload. */
export interface HookDispatch {
  stage: ToolCallHookStage;
  sessionId: string;
  instanceId: string;
  sandboxId: string;
  turnId: string | null;
  stepIndex: number;
  toolCalls: readonly ExtractedToolCall[] | null;
  toolMessages: readonly ToolMessage[] | null;
  signal: AbortSignal;
}

/**
 * Runs the configured hooks of a stage: `before` hooks in the configured order, `after` hooks in
 * reverse (setup and teardown nest, as in the reference). Each hook's outcome is kept per idempotency
 * key, so a retried request reuses it instead of running the hook again; a required failure is not
 * kept, so a retry runs that hook again.
 */
export class ToolCallHookRunner {
  readonly hooks: readonly ToolCallHook[];
  readonly #byStage: Record<ToolCallHookStage, readonly ToolCallHook[]>;
  readonly #beforeTimeoutSeconds: number | null;

  constructor(hooks: readonly ToolCallHook[], beforeTimeoutSeconds: number | null) {
    const names = new Set<string>();
    for (const hook of hooks) {
      validateToolCallHook(hook);
      if (names.has(hook.name)) throw invalidHook(`two hooks are named ${JSON.stringify(hook.name)}`);
      names.add(hook.name);
    }
    this.hooks = [...hooks];
    this.#byStage = {
      before: this.hooks.filter((hook) => hook.stages.includes('before')),
      after: this.hooks.filter((hook) => hook.stages.includes('after')).reverse(),
    };
    this.#beforeTimeoutSeconds = beforeTimeoutSeconds;
  }

  /** True when some hook runs at `stage`. */
  has(stage: ToolCallHookStage): boolean {
    return this.#byStage[stage].length > 0;
  }

  /**
   * Runs (or replays) the hooks of one stage and writes their outputs and optional failures into
   * `sink.metadata`.
   *
   * @throws ProxyHttpError 502 `tool_call_hook_failed` when a required hook fails or times out.
   */
  async dispatch(
    dispatch: HookDispatch,
    results: ToolCallHookResults,
    sink: HookMetadataSink,
  ): Promise<void> {
    const hooks = this.#byStage[dispatch.stage];
    if (hooks.length === 0) return;
    const key = toolCallIdempotencyKey(
      dispatch.sessionId,
      dispatch.turnId,
      dispatch.stepIndex,
      dispatch.stage,
    );
    let done = results.get(key);
    if (done === undefined) {
      done = new Map();
      results.set(key, done);
    }
    try {
      for (const hook of hooks) {
        let outcome = done.get(hook.name);
        if (outcome === undefined) {
          outcome = await this.#runOne(hook, dispatch, key);
          if (outcome.failure !== null && hook.required === true) {
            throw detailError(502, {
              error: 'tool_call_hook_failed',
              stage: dispatch.stage,
              message: `required tool-call hook ${hook.name} ${
                outcome.failure.timed_out
                  ? `timed out after ${outcome.failure.timeout_seconds}s`
                  : `failed: ${outcome.failure.error.message}`
              } at stage=${dispatch.stage}`,
              session_id: dispatch.sessionId,
              instance_id: dispatch.instanceId,
            });
          }
          done.set(hook.name, outcome);
        }
        record(sink, hook.name, dispatch.stage, outcome);
      }
    } finally {
      // A key counts as dispatched once some hook finished; an aborted first attempt leaves none.
      if (done.size === 0) results.delete(key);
    }
  }

  async #runOne(hook: ToolCallHook, dispatch: HookDispatch, key: string): Promise<HookOutcome> {
    const timeoutSeconds =
      hook.timeoutSeconds ?? (dispatch.stage === 'before' ? this.#beforeTimeoutSeconds : null);
    const own = new AbortController();
    const signal = AbortSignal.any([dispatch.signal, own.signal]);
    let timer: NodeJS.Timeout | undefined;
    try {
      const run = Promise.resolve().then(() =>
        hook.run({
          stage: dispatch.stage,
          sessionId: dispatch.sessionId,
          instanceId: dispatch.instanceId,
          sandboxId: dispatch.sandboxId,
          turnId: dispatch.turnId,
          stepIndex: dispatch.stepIndex,
          idempotencyKey: key,
          toolCalls: dispatch.toolCalls,
          toolMessages: dispatch.toolMessages,
          signal,
        }),
      );
      let output: unknown;
      if (timeoutSeconds === null) {
        output = await run;
      } else {
        run.catch(() => {}); // a late rejection after the timeout is not unhandled
        output = await Promise.race([
          run,
          new Promise<never>((_, reject) => {
            timer = setTimeout(() => {
              const error = new HookTimeout(timeoutSeconds);
              own.abort(error);
              reject(error);
            }, timeoutSeconds * 1000);
          }),
        ]);
      }
      // A snapshot of the output as JSON: later mutation by the hook cannot reach the record.
      return { output: output === undefined ? undefined : JSON.parse(JSON.stringify(output)), failure: null };
    } catch (error) {
      // The agent went away: not a hook failure, and nothing is kept for the key.
      dispatch.signal.throwIfAborted();
      const failure: ToolCallHookFailure = {
        hook: hook.name,
        stage: dispatch.stage,
        required: hook.required === true,
        error: {
          type: error instanceof Error ? error.name : typeof error,
          message: (error instanceof Error ? error.message : String(error)) || 'error',
        },
      };
      if (error instanceof HookTimeout && timeoutSeconds !== null) {
        failure.timed_out = true;
        failure.timeout_seconds = timeoutSeconds;
      }
      return { output: undefined, failure };
    } finally {
      clearTimeout(timer);
    }
  }
}

function record(sink: HookMetadataSink, name: string, stage: ToolCallHookStage, outcome: HookOutcome): void {
  if (outcome.failure === null && outcome.output === undefined) return;
  sink.metadata ??= {};
  const metadata = sink.metadata;
  if (outcome.failure !== null) {
    const failures = (metadata[TOOL_CALL_HOOK_FAILURES_KEY] ?? []) as ToolCallHookFailure[];
    failures.push(outcome.failure);
    metadata[TOOL_CALL_HOOK_FAILURES_KEY] = failures;
    return;
  }
  const byStage = (metadata[name] ?? {}) as Record<string, unknown>;
  byStage[stage] = outcome.output;
  metadata[name] = byStage;
}
