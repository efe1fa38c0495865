// Failure paths with a real CLI (opencode): each yields the documented sample, and what the proxy
// recorded for other sessions stays readable.
import type { Sample } from '@dressage/protocol';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { indexOfRun } from './cli-case.js';
import { CliEndToEnd } from './harness.js';

type Json = Record<string, unknown>;

async function post(url: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as Json };
}

/** Records and finalizes a one-call session that has nothing to do with the failing rollout. */
async function recordBystander(run: CliEndToEnd, session: string): Promise<void> {
  const chat = await post(
    run.proxy.url,
    '/v1/chat/completions',
    { model: 'policy', messages: [{ role: 'user', content: 'Name this session.' }] },
    { 'x-session-id': session },
  );
  expect(chat.status).toBe(200);
  expect((await post(run.proxy.url, '/session/finalize', { session_id: session })).status).toBe(200);
}

async function bystanderSegments(run: CliEndToEnd, session: string): Promise<number> {
  const read = await post(run.proxy.url, '/trajectory/read', { trajectory_id: session });
  return (read.body.data as unknown[]).length;
}

/** The sample's model tokens: the tool call the engine answered first is there, trained. */
function expectToolCallTrained(run: CliEndToEnd, samples: Sample[]): void {
  const call = run.model.taskReplies.find((reply) => reply.kind === 'tool_call');
  expect(call).toBeDefined();
  const holder = samples.find((sample) => indexOfRun(sample.tokens, call?.ids ?? []) !== -1) as Sample;
  expect(holder).toBeDefined();
  const at = indexOfRun(holder.tokens, call?.ids ?? []) - (holder.tokens.length - holder.response_length);
  expect(holder.loss_mask?.slice(at, at + (call?.ids.length ?? 0)).every((bit) => bit === 1)).toBe(true);
}

describe('opencode failure paths', () => {
  let run: CliEndToEnd | null = null;
  let skipReason: string | null = null;

  beforeAll(async () => {
    const started = await CliEndToEnd.start('opencode');
    if (typeof started === 'string') skipReason = started;
    else run = started;
  }, 900_000);
  afterEach(() => {
    if (run) run.model.override = null;
  });
  afterAll(async () => {
    await run?.close();
  });

  it('max_steps (429): the turn stops at the limit, and the steps taken are harvested', async (context) => {
    if (run === null) return context.skip(skipReason ?? 'not started');
    run.model.replies.length = 0;
    const samples = await run.generate(1)(run.sample('steps.txt', 'limited'));
    const metadata = samples[0]?.metadata as Json;
    expect(samples[0]?.status, JSON.stringify(metadata)).not.toBe('aborted');
    expect(metadata).toMatchObject({
      blackbox_agent_early_stop: true,
      blackbox_agent_early_stop_kind: 'max_steps_exceeded',
      blackbox_agent_http_status_code: 429,
    });
    // One step reached the engine; the second was refused before it.
    expect(run.model.taskReplies.map((reply) => reply.kind)).toEqual(['tool_call']);
    expectToolCallTrained(run, samples);
  }, 600_000);

  it('the CLI crashes mid-turn: an aborted sample with its failure, other sessions intact', async (context) => {
    if (run === null) return context.skip(skipReason ?? 'not started');
    await recordBystander(run, 'bystander-crash');
    const current = run;
    let killed = 0;
    // opencode dies while its second model call of the turn is at the engine; the reply goes
    // nowhere.
    current.model.override = (prompt) => {
      if (prompt.includes('<tool_response>')) killed = current.killInSlots('opencode');
      return null;
    };
    const samples = await current.generate()(current.sample('crash.txt', 'crashed'));
    expect(killed).toBeGreaterThan(0);
    expect(samples).toHaveLength(1);
    const sample = samples[0] as Sample;
    // The no-gradient placeholder: failed, removed, nothing to train.
    expect(sample).toMatchObject({ status: 'failed', remove_sample: true, response_length: 0 });
    expect(sample.metadata, JSON.stringify(sample.metadata)).toMatchObject({
      blackbox_agent_error_kind: 'backend_error',
    });
    expect(sample.metadata.blackbox_failure_history).toHaveLength(1);
    expect(await bystanderSegments(current, 'bystander-crash')).toBe(1);
  }, 600_000);

  it('the sandbox is killed mid-turn: an aborted sample with its failure, other sessions intact', async (context) => {
    if (run === null) return context.skip(skipReason ?? 'not started');
    await recordBystander(run, 'bystander-sandbox');
    const current = run;
    let killed = 0;
    current.model.override = (prompt) => {
      if (!prompt.includes('<tool_response>')) return null;
      // Everything of the slot: bwrap, the BlackboxServer, opencode.
      killed = current.killInSlots('');
      return { hang: true };
    };
    const samples = await current.generate()(current.sample('killed.txt', 'killed'));
    expect(killed).toBeGreaterThan(0);
    const sample = samples[0] as Sample;
    expect(sample).toMatchObject({ status: 'failed', remove_sample: true, response_length: 0 });
    expect(sample.metadata.blackbox_failure_history).toHaveLength(1);
    expect(await bystanderSegments(current, 'bystander-sandbox')).toBe(1);
  }, 600_000);
});

describe('opencode context overflow', () => {
  let run: CliEndToEnd | null = null;
  let skipReason: string | null = null;

  beforeAll(async () => {
    // Room for opencode's first request (about 7,200 tokens) but not for a 3,000-number tool result.
    const started = await CliEndToEnd.start('opencode', {}, ['--context-window', '12000']);
    if (typeof started === 'string') skipReason = started;
    else run = started;
  }, 900_000);
  afterAll(async () => {
    await run?.close();
  });

  it('context overflow (413): the turn stops, and the steps taken are harvested', async (context) => {
    if (run === null) return context.skip(skipReason ?? 'not started');
    await recordBystander(run, 'bystander-overflow');
    // The numbers 1 to 3000 on one line, as one shell word (the model's script takes a word).
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell expansion, not a template.
    const numbers = '$(seq${IFS}3000)';
    const samples = await run.generate()(run.sample('numbers.txt', numbers));
    const metadata = samples[0]?.metadata as Json;
    expect(samples[0]?.status, JSON.stringify(metadata)).not.toBe('aborted');
    expect(metadata).toMatchObject({
      blackbox_agent_early_stop: true,
      blackbox_agent_early_stop_kind: 'context_overflow',
      blackbox_agent_http_status_code: 413,
    });
    expect(run.model.taskReplies.map((reply) => reply.kind)).toEqual(['tool_call']);
    expectToolCallTrained(run, samples);
    expect(await bystanderSegments(run, 'bystander-overflow')).toBe(1);
  }, 600_000);
});
