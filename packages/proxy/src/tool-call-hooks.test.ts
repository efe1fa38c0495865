import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DressageError, proxyErrorDetailSchema, segmentSchema } from '@dressage/protocol';
import { afterEach, describe, expect, it } from 'vitest';
import { createFakePromptTokenizer } from './__fixtures__/fake-tokenizer.js';
import { type Harness, type JsonBody, startHarness, temporaryDirectory } from './__fixtures__/harness.js';
import { createProxyConfig, parseProxyArguments } from './config.js';
import { ProxyService } from './proxy-service.js';
import {
  loadToolCallHooks,
  type ToolCallHook,
  type ToolCallHookContext,
  type ToolCallHookStage,
} from './tool-call-hooks.js';

let harness: Harness;
let running: Harness | null = null;
const cleanups: Array<() => void> = [];
afterEach(async () => {
  await running?.close();
  running = null;
  for (const cleanup of cleanups.splice(0)) cleanup();
});

const toolCallText =
  '<tool_call>\n<function=ls>\n<parameter=path>\n/tmp\n</parameter>\n</function>\n</tool_call>';
const user = { role: 'user', content: 'list /tmp' };
const ids = { 'x-session-id': 's', 'x-instance-id': 'g', 'x-turn-id': 't1' };
const withSandbox = { ...ids, 'x-dressage-sandbox-id': 'sb-1' };

/** A hook that remembers every context it was run with and answers with `answer(context)`. */
function recorder(
  name: string,
  stages: ToolCallHookStage[],
  answer: (context: ToolCallHookContext) => unknown = (context) => ({ n: context.stepIndex }),
  extra: Partial<ToolCallHook> = {},
): ToolCallHook & { calls: ToolCallHookContext[] } {
  const calls: ToolCallHookContext[] = [];
  return {
    name,
    stages,
    ...extra,
    calls,
    run(context) {
      calls.push(context);
      return answer(context);
    },
  };
}

async function start(hooks: ToolCallHook[], config: Parameters<typeof startHarness>[0] = {}) {
  harness = await startHarness({ ...config, toolCallHooks: hooks });
  running = harness;
}

function chat(messages: unknown[], headers: Record<string, string> = withSandbox, extra = {}) {
  return harness.call('POST', '/v1/chat/completions', { messages, ...extra }, headers);
}

/** Step 1 answers with a tool call; the second request carries its result. */
async function toolRoundTrip(headers: Record<string, string> = withSandbox) {
  harness.engine.script = (_request, index) => ({ text: index === 0 ? toolCallText : 'done' });
  const first = await chat([user], headers);
  expect(first.status).toBe(200);
  const assistant = first.body.choices[0].message;
  const tool = { role: 'tool', tool_call_id: assistant.tool_calls[0].id, content: 'a.txt' };
  const second = await chat([user, assistant, tool], headers);
  return { first, second, assistant, tool };
}

async function finalizeAndRead(
  view: 'lineage' | 'timeline',
): Promise<{ finalize: JsonBody; data: JsonBody[] }> {
  const finalize = await harness.call('POST', '/session/finalize', { session_id: 's' });
  expect(finalize.status).toBe(200);
  const read = await harness.call('POST', '/trajectory/read', { trajectory_id: 's', segment_view: view });
  for (const segment of read.body.data) segmentSchema.parse(segment);
  return { finalize: finalize.body, data: read.body.data };
}

describe('tool-call hook stages', () => {
  it('runs before after tool calls are parsed and after when the request ends with tool results', async () => {
    const hook = recorder('snap', ['before', 'after'], (context) => ({
      stage: context.stage,
      step: context.stepIndex,
    }));
    await start([hook]);
    const { second, assistant, tool } = await toolRoundTrip();
    expect(second.status).toBe(200);
    expect(hook.calls).toHaveLength(2);

    const [before, after] = hook.calls;
    expect(before).toMatchObject({
      stage: 'before',
      sessionId: 's',
      instanceId: 'g',
      sandboxId: 'sb-1',
      turnId: 't1',
      stepIndex: 0,
      idempotencyKey: 's:t1:0:before',
      toolMessages: null,
    });
    expect(before!.toolCalls).toEqual(assistant.tool_calls);
    expect(before!.toolCalls![0]!.function).toEqual({ name: 'ls', arguments: '{"path": "/tmp"}' });
    expect(before!.signal).toBeInstanceOf(AbortSignal);
    expect(after).toMatchObject({
      stage: 'after',
      stepIndex: 1,
      idempotencyKey: 's:t1:1:after',
      toolCalls: null,
      toolMessages: [tool],
    });

    const timeline = await finalizeAndRead('timeline');
    expect(timeline.data.map((segment) => segment.extra_info.tool_call_hooks)).toEqual([
      { snap: { before: { stage: 'before', step: 0 } } },
      { snap: { after: { stage: 'after', step: 1 } } },
    ]);
    const lineage = await harness.call('POST', '/trajectory/read', {
      trajectory_id: 's',
      segment_view: 'lineage',
    });
    expect(lineage.body.data).toHaveLength(1);
    expect(lineage.body.data[0].extra_info.tool_call_hooks).toEqual({
      snap: [{ before: { stage: 'before', step: 0 } }, { after: { stage: 'after', step: 1 } }],
    });
  });

  it('reads the sandbox id from the body, runs before hooks in order and after hooks in reverse', async () => {
    const order: string[] = [];
    const hook = (name: string) =>
      recorder(name, ['before', 'after'], (context) => {
        order.push(`${context.stage}:${name}`);
        return undefined;
      });
    await start([hook('a'), hook('b')]);
    const { second } = await toolRoundTrip(ids);
    expect(second.status).toBe(200);
    expect(order).toEqual([]);

    harness.engine.script = () => ({ text: toolCallText });
    const messages = [user, { role: 'tool', tool_call_id: 'call1', content: 'x' }];
    const response = await chat(messages, { 'x-session-id': 'other' }, { sandbox_id: 'sb-body' });
    expect(response.status).toBe(200);
    expect(order).toEqual(['after:b', 'after:a', 'before:a', 'before:b']);
  });

  it('is not dispatched without a sandbox id, and records nothing', async () => {
    const hook = recorder('snap', ['before', 'after']);
    await start([hook]);
    const { second } = await toolRoundTrip(ids);
    expect(second.status).toBe(200);
    expect(hook.calls).toHaveLength(0);
    const { finalize, data } = await finalizeAndRead('timeline');
    expect(finalize).not.toHaveProperty('tool_call_hook_keys_purged');
    for (const segment of data) expect(segment.extra_info).not.toHaveProperty('tool_call_hooks');
  });
});

describe('idempotency', () => {
  it('a retried request reuses the outcome of its key instead of running the hook again', async () => {
    const hook = recorder('snap', ['after'], (context) => ({ key: context.idempotencyKey }));
    await start([hook]);
    const messages = [user, { role: 'tool', tool_call_id: 'call1', content: 'x' }];
    harness.engine.script = (_request, index) => (index === 0 ? { status: 500 } : { text: 'ok' });
    const failed = await chat(messages);
    expect(failed.status).toBe(500);
    const retried = await chat(messages);
    expect(retried.status).toBe(200);
    expect(hook.calls).toHaveLength(1);
    expect(harness.engine.requests).toHaveLength(2);

    const { finalize, data } = await finalizeAndRead('timeline');
    expect(finalize.tool_call_hook_keys_purged).toBe(1);
    expect(data[0].extra_info.tool_call_hooks).toEqual({ snap: { after: { key: 's:t1:0:after' } } });
  });

  it('discard purges a session’s keys, so a new session with the same id runs its hooks again', async () => {
    const hook = recorder('snap', ['before', 'after']);
    await start([hook]);
    await toolRoundTrip();
    expect(hook.calls.map((call) => call.idempotencyKey)).toEqual(['s:t1:0:before', 's:t1:1:after']);
    const discard = await harness.call('POST', '/session/discard', { session_id: 's' });
    expect(discard.body).toEqual({
      success: true,
      session_id: 's',
      session_removed: true,
      segments_removed: 0,
      tool_call_hook_keys_purged: 2,
    });
    const again = await harness.call('POST', '/session/discard', { session_id: 's' });
    expect(again.body.tool_call_hook_keys_purged).toBe(0);

    harness.engine.script = () => ({ text: toolCallText });
    expect((await chat([user])).status).toBe(200);
    expect(hook.calls.map((call) => call.idempotencyKey)).toEqual([
      's:t1:0:before',
      's:t1:1:after',
      's:t1:0:before',
    ]);
  });
});

describe('failures', () => {
  it('a required hook failure is a 502 tool_call_hook_failed; the failed step is not recorded and a retry runs the hook again', async () => {
    let failing = true;
    const hook = recorder(
      'net',
      ['before'],
      () => {
        if (failing) throw new Error('sandbox gone');
        return { opened: true };
      },
      { required: true },
    );
    await start([hook]);
    harness.engine.script = (_request, index) => ({ text: index === 0 ? 'hello' : toolCallText });
    expect((await chat([user])).status).toBe(200);

    const messages = [user, { role: 'assistant', content: 'hello' }, { role: 'user', content: 'go on' }];
    const failed = await chat(messages);
    expect(failed.status).toBe(502);
    expect(failed.body).toEqual({
      detail: {
        error: 'tool_call_hook_failed',
        stage: 'before',
        message: 'required tool-call hook net failed: sandbox gone at stage=before',
        session_id: 's',
        instance_id: 'g',
      },
    });
    expect(proxyErrorDetailSchema.safeParse(failed.body.detail).success).toBe(true);

    failing = false;
    const retried = await chat(messages);
    expect(retried.status).toBe(200);
    expect(hook.calls.map((call) => call.idempotencyKey)).toEqual(['s:t1:1:before', 's:t1:1:before']);
    const { finalize, data } = await finalizeAndRead('timeline');
    expect(finalize.num_steps).toBe(2);
    expect(data[0].extra_info).not.toHaveProperty('tool_call_hooks');
    expect(data[1].extra_info.tool_call_hooks).toEqual({ net: { before: { opened: true } } });
  });

  it('a required after hook failure answers 502 before the engine is called', async () => {
    await start([
      recorder(
        'snap',
        ['after'],
        () => {
          throw new Error('no snapshot');
        },
        { required: true },
      ),
    ]);
    const response = await chat([user, { role: 'tool', tool_call_id: 'c', content: 'x' }]);
    expect(response.status).toBe(502);
    expect(response.body.detail).toMatchObject({ error: 'tool_call_hook_failed', stage: 'after' });
    expect(harness.engine.requests).toHaveLength(0);
  });

  it('a required before hook past --tool-call-hook-before-timeout is a 502, and its signal is aborted', async () => {
    let aborted: unknown = null;
    const hook = recorder(
      'slow',
      ['before'],
      ({ signal }) =>
        new Promise((resolve) => {
          signal.addEventListener('abort', () => {
            aborted = signal.reason;
            resolve('late');
          });
        }),
      { required: true },
    );
    await start([hook], { config: { toolCallHookBeforeTimeoutSeconds: 0.05 } });
    harness.engine.script = () => ({ text: toolCallText });
    const response = await chat([user]);
    expect(response.status).toBe(502);
    expect(response.body.detail).toEqual({
      error: 'tool_call_hook_failed',
      stage: 'before',
      message: 'required tool-call hook slow timed out after 0.05s at stage=before',
      session_id: 's',
      instance_id: 'g',
    });
    expect((aborted as Error).name).toBe('TimeoutError');
  });

  it('records optional failures and timeouts in tool_call_hook_failures and goes on', async () => {
    const broken = recorder('broken', ['before'], () => {
      throw new TypeError('boom');
    });
    const slow = recorder('slow', ['after'], () => new Promise(() => {}), { timeoutSeconds: 0.05 });
    const fine = recorder('fine', ['before', 'after'], (context) => context.stage);
    await start([broken, slow, fine]);
    const { second } = await toolRoundTrip();
    expect(second.status).toBe(200);
    const { data } = await finalizeAndRead('timeline');
    expect(data[0].extra_info.tool_call_hooks).toEqual({
      tool_call_hook_failures: [
        { hook: 'broken', stage: 'before', required: false, error: { type: 'TypeError', message: 'boom' } },
      ],
      fine: { before: 'before' },
    });
    expect(data[1].extra_info.tool_call_hooks).toEqual({
      fine: { after: 'after' },
      tool_call_hook_failures: [
        {
          hook: 'slow',
          stage: 'after',
          required: false,
          error: { type: 'TimeoutError', message: 'timed out after 0.05s' },
          timed_out: true,
          timeout_seconds: 0.05,
        },
      ],
    });
  });
});

describe('hooks from modules', () => {
  function hookModule(source: string): string {
    const directory = temporaryDirectory();
    cleanups.push(directory.remove);
    const path = join(directory.path, 'hooks.mjs');
    writeFileSync(path, source);
    return path;
  }

  it('loads a hook named by --tool-call-hooks and the before timeout', async () => {
    const path = hookModule(`
      export const snapshot = {
        name: 'snapshot',
        stages: ['after'],
        required: true,
        async run(context) {
          return { sandbox: context.sandboxId, key: context.idempotencyKey };
        },
      };
    `);
    const parsed = parseProxyArguments(
      [
        '--tokenizer-path',
        'fake',
        '--store-dir',
        'none',
        '--tool-call-hooks',
        `${path}:snapshot`,
        '--tool-call-hook-before-timeout',
        '2.5',
      ],
      {},
    );
    if (parsed.help) throw new Error('unexpected help');
    expect(parsed.config.toolCallHooks).toEqual([`${path}:snapshot`]);
    expect(parsed.config.toolCallHookBeforeTimeoutSeconds).toBe(2.5);

    await start([], {
      config: {
        toolCallHooks: parsed.config.toolCallHooks,
        toolCallHookBeforeTimeoutSeconds: parsed.config.toolCallHookBeforeTimeoutSeconds,
      },
    });
    expect(harness.proxy.service.toolCallHooks.map((hook) => hook.name)).toEqual(['snapshot']);
    harness.engine.script = () => ({ text: 'ok' });
    expect((await chat([user, { role: 'tool', tool_call_id: 'c', content: 'x' }])).status).toBe(200);
    const { data } = await finalizeAndRead('timeline');
    expect(data[0].extra_info.tool_call_hooks).toEqual({
      snapshot: { after: { sandbox: 'sb-1', key: 's:t1:0:after' } },
    });
  });

  it('accepts default exports, arrays, factories and comma-separated lists; rejects bad entries', async () => {
    const path = hookModule(`
      const hook = (name) => ({ name, stages: ['before'], run() {} });
      export default [hook('a'), hook('b')];
      export async function factory() { return hook('c'); }
      export const broken = { name: 'broken', stages: ['during'], run() {} };
    `);
    const hooks = await loadToolCallHooks([`${path},${path}#factory`]);
    expect(hooks.map((hook) => hook.name)).toEqual(['a', 'b', 'c']);

    const failure = (entry: string) =>
      loadToolCallHooks([entry]).then(
        () => null,
        (error: unknown) => error,
      );
    for (const entry of [`${path}:missing`, `${path}:broken`, join(path, '..', 'absent.mjs')]) {
      const error = await failure(entry);
      expect(DressageError.isInstance(error)).toBe(true);
      expect((error as DressageError).code).toBe('invalid_argument');
    }
    expect(((await failure(`${path}:broken`)) as Error).message).toMatch(/stages/);
  });

  it('refuses two hooks with one name at startup', async () => {
    const config = createProxyConfig({ tokenizerPath: 'fake', storeDirectory: null });
    const toolCallHooks = [recorder('same', ['after']), recorder('same', ['before'])];
    await expect(ProxyService.create(config, createFakePromptTokenizer(), { toolCallHooks })).rejects.toThrow(
      /two hooks are named "same"/,
    );
  });
});
