import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ScriptAgentAdapter } from '../__fixtures__/script-agent.js';
import { type Script, ScriptedModelServer } from '../__fixtures__/scripted-model.js';
import { BlackboxServer } from './server.js';

type Json = Record<string, unknown>;

// The model's behaviour is chosen by the last user message of the request.
const script: Script = async (request, { step }) => {
  const messages = request.messages as Json[];
  const user = String([...messages].reverse().find((message) => message.role === 'user')?.content ?? '');
  const last = messages.at(-1) as Json;
  if (user.includes('overflow')) {
    return {
      status: 413,
      body: {
        error: 'context_overflow',
        message: 'Dressage proxy context window overflow.',
        details: { phase: 'input' },
      },
    };
  }
  if (user.includes('preempt')) {
    return {
      status: 502,
      body: { detail: { error: 'generation_preempted', message: 'preempted by weight update' } },
    };
  }
  if (user.includes('stream-error') && request.stream === true) {
    return { streamError: { error: { message: 'too long', code: 'context_overflow', status_code: 413 } } };
  }
  if (user.includes('slow')) await new Promise((resolve) => setTimeout(resolve, 1500));
  if (user.includes('loop'))
    return { content: `step ${step}`, tool_calls: [{ name: 'shell', arguments: { cmd: 'true' } }] };
  if (last.role === 'tool') return { content: `done: ${String(last.content).trim()}` };
  if (user.includes('write')) {
    return {
      content: 'writing',
      tool_calls: [{ name: 'shell', arguments: { cmd: 'echo hello > out.txt && cat out.txt' } }],
    };
  }
  return { content: `echo ${user}` };
};

describe('BlackboxServer over HTTP', () => {
  let model: ScriptedModelServer;
  let workDir: string;
  let server: BlackboxServer;
  let base: string;
  let adapter: ScriptAgentAdapter;
  let counter = 0;

  beforeAll(async () => {
    model = new ScriptedModelServer(script);
    await model.start();
  });
  afterAll(async () => {
    await model.close();
  });

  async function boot(config: Json = {}) {
    workDir = mkdtempSync(join(tmpdir(), 'bbs-work-'));
    server = new BlackboxServer({
      config: {
        host: '127.0.0.1',
        port: 0,
        runtime_root: join(workDir, '.runtime'),
        runtime_health_check_retries: 0,
        // The test stands in for the sandbox the server would run in.
        inside_sandbox: true,
        ...config,
      },
      workDir,
      adapters: {
        script_agent: () => {
          adapter = new ScriptAgentAdapter();
          return adapter;
        },
      },
    });
    base = await server.listen();
  }

  afterEach(async () => {
    await server?.close();
    rmSync(workDir, { recursive: true, force: true });
  });

  async function call(method: string, path: string, body?: unknown) {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: body === undefined ? undefined : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: response.status, headers: response.headers, body: (await response.json()) as Json };
  }

  async function register(extra: Json = {}) {
    counter += 1;
    const session = `bbs-${counter}`;
    const result = await call('POST', '/v1/rollout/register', {
      blackbox_type: 'script_agent',
      router: model.url.replace('http://', ''),
      bound_session_id: session,
      bound_instance_id: 'instance-1',
      ...extra,
    });
    return { session, result };
  }

  const user = (content: string) => [{ role: 'user', content }];

  it('registers, runs a sync turn with tools, and reports status and health', async () => {
    await boot();
    const health = await call('GET', '/health');
    expect(health.body).toEqual({ healthy: true, version: expect.any(String) });
    expect(health.headers.get('x-request-id')).toMatch(/^req-[0-9a-f]{8}$/);
    const { session, result } = await register({ backend_options: { proxy: { max_steps: 10 } } });
    expect(result.status).toBe(200);
    expect(result.body).toMatchObject({
      status: 'ready',
      binding: { router_base_url: model.url, router_api_path: '/v1', bound_session_id: session },
    });
    const status = await call('GET', '/v1/status');
    expect(status.body).toMatchObject({ status: 'ready', sessions: { active_count: 1, max_sessions: 1 } });
    expect(status.body.known_backends).toContain('opencode');

    const turn = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 't1',
      messages: user('please write'),
    });
    expect(turn.status).toBe(200);
    expect(turn.body).toMatchObject({
      turn_id: 't1',
      state: 'active',
      idempotent_replay: false,
      usage: { steps: 2, tool_calls: 1 },
    });
    const outputs = turn.body.outputs as Json[];
    expect(outputs.map((message) => message.role)).toEqual(['assistant', 'tool', 'assistant']);
    expect(outputs[2]?.content).toBe('done: hello');

    // Header injection and stripping on the way to the model.
    const sent = model.requests.at(-1)?.headers ?? {};
    expect(sent['x-session-id']).toBe(session);
    expect(sent['x-smg-routing-key']).toBe(session);
    expect(sent['x-instance-id']).toBe('instance-1');
    expect(sent['x-turn-id']).toBe('t1');
    expect(sent['x-dressage-partial-rollout']).toBe('1');
    expect(sent.authorization).toBeUndefined();
    const streamed = model.requests.at(-1)?.body as Json;
    expect(streamed.stream_options).toEqual({ include_usage: true });

    // Same turn id, same body: idempotent replay of the committed result.
    const replay = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 't1',
      messages: user('please write'),
    });
    expect(replay.body).toMatchObject({ idempotent_replay: true, outputs });
    const conflict = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 't1',
      messages: user('other'),
    });
    expect(conflict.status).toBe(409);
    const omitted = await call('POST', `/v1/sessions/${session}/messages`, { messages: user('no id') });
    expect(omitted.status).toBe(400);

    const command = await call('POST', `/v1/sessions/${session}/execute_cmd`, {
      cmd: 'cat out.txt; echo err >&2',
    });
    expect(command.body).toMatchObject({
      stdout: 'hello\n',
      stderr: 'err\n',
      returncode: 0,
      timed_out: false,
    });
    const multiline = await call('POST', `/v1/sessions/${session}/execute_cmd`, { cmd: 'echo a\necho b' });
    expect(multiline.status).toBe(400);
    const timeout = await call('POST', `/v1/sessions/${session}/execute_cmd`, {
      cmd: 'sleep 30 & sleep 30',
      timeout: 0.5,
    });
    expect(timeout.body).toMatchObject({ timed_out: true });

    const history = await call('GET', `/v1/sessions/${session}?include_history=true&include_turns=1`);
    expect(history.body).toMatchObject({ state: 'active', turn_count: 1, latest_turn_id: 't1' });
    expect((history.body.history as Json[]).length).toBe(4);
  });

  it('answers bad input with 400 request_error naming the field, and keeps serving', async () => {
    await boot();
    const malformed = await call('POST', '/v1/rollout/register', '{not json');
    expect(malformed.status).toBe(400);
    expect(malformed.body).toMatchObject({
      error: 'request_error',
      request_id: expect.stringMatching(/^req-/),
    });
    const typed = await call('POST', '/v1/rollout/register', { blackbox_type: 'script_agent', router: 5 });
    expect(typed.status).toBe(400);
    const paths = ((typed.body.details as Json).errors as Json[]).map((issue) => issue.path);
    expect(paths).toContain('router');
    const extraProxy = await register({ backend_options: { proxy: { nope: 1 } } });
    expect(extraProxy.result.status).toBe(400);
    const unknown = await call('POST', '/v1/rollout/register', {
      blackbox_type: 'codex',
      router: model.url,
      bound_session_id: 's',
      bound_instance_id: 'i',
    });
    expect(unknown.status).toBe(400);
    const { session } = await register();
    const mismatch = await call('POST', '/v1/sessions/other-session/messages', { messages: user('hi') });
    expect(mismatch.status).toBe(409);
    expect(mismatch.body).toMatchObject({
      error: 'bound_session_mismatch',
      details: { expected: session, actual: 'other-session' },
    });
    const two = await call('POST', `/v1/sessions/${session}/messages`, {
      messages: [...user('a'), ...user('b')],
    });
    expect(two.status).toBe(400);
    const asyncWithoutId = await call('POST', `/v1/sessions/${session}/messages`, {
      mode: 'async',
      messages: user('a'),
    });
    expect(asyncWithoutId.status).toBe(400);
    expect((await call('GET', '/health')).status).toBe(200);
  });

  it('re-registers idempotently and refuses a different binding while a session is live', async () => {
    await boot();
    const first = await register();
    const again = await call('POST', '/v1/rollout/register', {
      blackbox_type: 'script_agent',
      router: model.url.replace('http://', ''),
      bound_session_id: first.session,
      bound_instance_id: 'instance-1',
    });
    expect(again.status).toBe(200);
    expect((again.body.binding as Json).runtime_id).toBe((first.result.body.binding as Json).runtime_id);
    const other = await register();
    expect(other.result.status).toBe(409);
  });

  it('maps every turn outcome to the error table', async () => {
    await boot();
    // Only the slow case runs with a timeout below its 1.5 s reply: a loaded machine must not time
    // out the others.
    const cases: [string, Json, number, string, string, Json?][] = [
      ['overflow', {}, 413, 'context_overflow', 'desynced'],
      ['stream-error please', {}, 413, 'context_overflow', 'desynced'],
      ['loop', { proxy: { max_steps: 3 } }, 429, 'max_steps_exceeded', 'desynced'],
      ['crash', {}, 502, 'backend_error', 'desynced'],
      ['preempt', {}, 502, 'backend_error', 'desynced'],
      ['slow', {}, 504, 'backend_timeout', 'desynced', { backend_timeout: 0.5 }],
    ];
    for (const [text, options, status, error, state, serverConfig] of cases) {
      const { session } = await register({
        backend_options: options,
        ...(serverConfig ? { server_config: serverConfig } : {}),
      });
      const result = await call('POST', `/v1/sessions/${session}/messages`, { messages: user(text) });
      expect([text, result.status, result.body.error]).toEqual([text, status, error]);
      const view = await call('GET', `/v1/sessions/${session}`);
      expect(view.body.state).toBe(state);
      if (text === 'preempt') expect(result.body.message).toContain('Dressage proxy generation_preempted');
      if (text === 'loop') expect(result.body.details).toMatchObject({ max_steps: 3, attempted_step: 4 });
      // Harvesting: commands still run after context overflow and max steps, not after other failures.
      const command = await call('POST', `/v1/sessions/${session}/execute_cmd`, { cmd: 'echo harvest' });
      const harvestable = error === 'context_overflow' || error === 'max_steps_exceeded';
      expect([text, command.status]).toEqual([text, harvestable ? 200 : 409]);
      const next = await call('POST', `/v1/sessions/${session}/messages`, { messages: user('again') });
      expect(next.status).toBe(409);
      // A desynced session blocks a new binding until it is aborted.
      await call('POST', `/v1/sessions/${session}/abort`);
    }
  });

  it('runs async turns with long polling, cancel and abort', async () => {
    await boot();
    const { session } = await register();
    const submitted = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'a1',
      mode: 'async',
      messages: user('hello'),
    });
    expect(submitted.status).toBe(202);
    expect(submitted.body).toMatchObject({ turn_id: 'a1', idempotent_replay: false });
    const polled = await call('GET', `/v1/sessions/${session}/turns/a1?wait=30`);
    expect(polled.body).toMatchObject({
      status: 'committed',
      state: 'active',
      outputs: [{ role: 'assistant', content: 'echo hello' }],
    });
    const resubmitted = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'a1',
      mode: 'async',
      messages: user('hello'),
    });
    expect(resubmitted.body).toMatchObject({ status: 'committed', idempotent_replay: true });

    await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'a2',
      mode: 'async',
      messages: user('slow'),
    });
    const busy = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'a3',
      mode: 'async',
      messages: user('x'),
    });
    expect(busy.body).toMatchObject({ error: 'conflict', details: { active_turn_id: 'a2' } });
    const cancel = await call('POST', `/v1/sessions/${session}/turns/a2/cancel`);
    expect(cancel.body.status).toBe('cancel_requested');
    const cancelled = await call('GET', `/v1/sessions/${session}/turns/a2?wait=30`);
    expect(cancelled.body).toMatchObject({
      status: 'cancelled',
      error: { error: 'cancelled', http_status: 499 },
    });
    const replayCancelled = await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'a2',
      messages: user('slow'),
    });
    expect(replayCancelled.status).toBe(499);

    await call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'a4',
      mode: 'async',
      messages: user('slow'),
    });
    const aborted = await call('POST', `/v1/sessions/${session}/abort`);
    expect(aborted.body).toMatchObject({ action: 'abort', state: 'aborted', mode: 'best_effort' });
    const turn = await call('GET', `/v1/sessions/${session}/turns/a4`);
    expect(turn.body).toMatchObject({ status: 'unknown', error: { error: 'aborted', http_status: 409 } });
    expect((await call('POST', `/v1/sessions/${session}/abort`)).body.mode).toBe('noop');
    expect((await call('POST', `/v1/sessions/${session}/execute_cmd`, { cmd: 'true' })).status).toBe(409);
    expect((await call('GET', `/v1/sessions/${session}/turns/missing`)).status).toBe(404);
  });

  it('pauses and resumes: turns wait while paused and the upstream proxy is told', async () => {
    await boot();
    const { session } = await register();
    const paused = await call('POST', '/v1/rollout/pause', { reason: 'weight_update', timeout_seconds: 5 });
    expect(paused.body).toMatchObject({ status: 'paused', reason: 'weight_update', quiesced: true });
    expect((await call('GET', '/v1/rollout/pause_state')).body).toMatchObject({
      paused: true,
      pause_reason: 'weight_update',
      adapter: { paused: true },
    });
    expect(model.controlCalls.at(-1)).toMatchObject({
      path: '/v1/rollout/pause',
      body: { session_id: session, mode: 'preempt' },
    });
    const waiting = call('POST', `/v1/sessions/${session}/messages`, {
      turn_id: 'p1',
      messages: user('during pause'),
    });
    const early = await call('GET', `/v1/sessions/${session}`);
    expect(early.body.turn_count).toBe(0);
    const resumed = await call('POST', '/v1/rollout/resume', { reason: 'weight_update', version: 7 });
    expect(resumed.body).toMatchObject({ status: 'resumed', version: '7' });
    const done = await waiting;
    expect(done.body).toMatchObject({ turn_id: 'p1', outputs: [{ content: 'echo during pause' }] });
    expect(model.requests.at(-1)?.headers['x-dressage-expected-version']).toBe('7');
    const state = await call('GET', '/v1/rollout/pause_state');
    expect(state.body).toMatchObject({ paused: false, version: '7' });
    expect((state.body.adapter as Json).total_paused_seconds).toBeGreaterThan(0);
  });

  it('enters the error state when the agent stops answering health checks', async () => {
    await boot();
    const promptFile = join(workDir, 'prompt.txt');
    writeFileSync(promptFile, 'be brief');
    const { session, result } = await register({ system_prompt_file: promptFile });
    expect((result.body.binding as Json).system_prompt).toMatchObject({ source_file: promptFile });
    adapter.healthy = false;
    const refused = await call('POST', `/v1/sessions/${session}/messages`, { messages: user('hi') });
    expect(refused.status).toBe(503);
    expect((await call('GET', '/v1/status')).body).toMatchObject({
      status: 'error',
      sessions: { desynced_count: 1 },
    });
  });
});
