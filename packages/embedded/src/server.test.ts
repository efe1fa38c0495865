import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sglangGenerateResponseSchema } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  chatPrompt,
  type EmbeddedFixture,
  type GenerateResponseBody,
  getJson,
  type LogprobEntry,
  postJson,
  startFixture,
  waitFor,
} from './__fixtures__/embedded-fixture.js';
import { saveCheckpoint } from './checkpoint.js';
import { CausalLanguageModel } from './model.js';
import { startEngineServer } from './server.js';

let fixture: EmbeddedFixture;
let prompt: number[];
let scratch: string;

beforeAll(async () => {
  fixture = await startFixture();
  prompt = Array.from(fixture.tokenizer.encode(chatPrompt('What is 12 + 30? Use the calculator.')));
  scratch = await mkdtemp(join(tmpdir(), 'embedded-server-'));
});

afterAll(async () => {
  await fixture.close();
  await rm(scratch, { recursive: true, force: true });
});

function generate(body: Record<string, unknown>, signal?: AbortSignal) {
  return postJson(
    `${fixture.server.url}/generate`,
    { input_ids: prompt, return_logprob: true, ...body },
    signal,
  );
}

function logprobsOf(entries: LogprobEntry[] | undefined): number[] {
  return (entries ?? []).map((entry) => entry[0] ?? Number.NaN);
}

function maxAbsDiff(left: ArrayLike<number>, right: ArrayLike<number>): number {
  expect(left.length).toBe(right.length);
  let max = 0;
  for (let index = 0; index < left.length; index++)
    max = Math.max(max, Math.abs(left[index]! - right[index]!));
  return max;
}

/** Logprobs of the output ids recomputed by one full forward pass over prompt + output. */
function recomputed(promptIds: number[], body: GenerateResponseBody, temperature = 1): Float32Array {
  const [all] = fixture.model.sequenceLogprobs([[...promptIds, ...body.output_ids]], temperature);
  return all!.slice(promptIds.length - 1);
}

/** Text of ids as the server renders it by default (special tokens skipped). */
function visibleText(ids: number[]): string {
  const visible = ids.filter((id) => !fixture.tokenizer.specialTokens.has(fixture.tokenizer.idToToken(id)!));
  return visible.length === 0 ? '' : fixture.tokenizer.decode(visible);
}

const long = { temperature: 1, max_new_tokens: 200, ignore_eos: true };

describe('POST /generate', () => {
  it('answers in SGLang shape and repeats itself for a sampling seed', async () => {
    const sampling = { temperature: 1, max_new_tokens: 12, sampling_seed: 11, ignore_eos: true };
    const first = await generate({
      sampling_params: sampling,
      rid: 'seeded-1',
      return_text_in_logprobs: true,
    });
    const second = await generate({ sampling_params: sampling });
    const other = await generate({ sampling_params: { ...sampling, sampling_seed: 12 } });
    expect(first.status).toBe(200);
    // The answer the proxy decodes: protocol's one schema of SGLang's /generate.
    expect(sglangGenerateResponseSchema.safeParse(first.body).success).toBe(true);
    const { meta_info: meta } = first.body;
    expect(meta.id).toBe('seeded-1');
    expect(meta.finish_reason).toEqual({ type: 'length', length: 12 });
    expect(meta.prompt_tokens).toBe(prompt.length);
    expect(meta.completion_tokens).toBe(12);
    expect(meta.weight_version).toBe('v1');
    expect(meta.output_token_logprobs).toHaveLength(12);
    expect(meta.output_token_logprobs!.map((entry) => entry[1])).toEqual(first.body.output_ids);
    expect(meta.output_token_logprobs![0]![2]).toBe(fixture.tokenizer.decode([first.body.output_ids[0]!]));
    expect(meta.input_token_logprobs).toBeUndefined();
    expect(first.body.output_ids.every((id) => fixture.vocabulary.has(id))).toBe(true);
    expect(second.body.output_ids).toEqual(first.body.output_ids);
    expect(logprobsOf(second.body.meta_info.output_token_logprobs)).toEqual(
      logprobsOf(meta.output_token_logprobs),
    );
    expect(other.body.output_ids).not.toEqual(first.body.output_ids);
    expect(first.body.text).toBe(visibleText(first.body.output_ids));
  });

  it('reports sampling-time logprobs equal to a fresh full forward pass, prompt logprobs included', async () => {
    for (const temperature of [1, 0.7]) {
      const { body } = await generate({
        sampling_params: { temperature, max_new_tokens: 40, sampling_seed: 5, ignore_eos: true },
        logprob_start_len: 0,
      });
      const output = logprobsOf(body.meta_info.output_token_logprobs);
      expect(maxAbsDiff(output, recomputed(prompt, body, temperature))).toBeLessThan(1e-4);
      const input = body.meta_info.input_token_logprobs!;
      expect(input).toHaveLength(prompt.length);
      expect(input[0]![0]).toBeNull();
      expect(input.map((entry) => entry[1])).toEqual(prompt);
      const [reference] = fixture.model.sequenceLogprobs([prompt], temperature);
      expect(maxAbsDiff(logprobsOf(input.slice(1)), reference!)).toBeLessThan(1e-4);
    }
    const partial = await generate({
      sampling_params: { max_new_tokens: 0 },
      logprob_start_len: prompt.length - 3,
    });
    expect(partial.body.meta_info.input_token_logprobs).toHaveLength(3);
    expect(partial.body.meta_info.finish_reason).toEqual({ type: 'length', length: 0 });
    expect(partial.body.output_ids).toEqual([]);
  });

  it('stops on stop_token_ids and the eos token, keeping the stop id, and trims text unless no_stop_trim', async () => {
    const greedy = await generate({
      sampling_params: { temperature: 0, max_new_tokens: 8, ignore_eos: true },
    });
    const ids = greedy.body.output_ids;
    const stopId = ids[3]!;
    const expected = ids.slice(0, ids.indexOf(stopId) + 1);
    const stopped = await generate({
      sampling_params: { temperature: 0, max_new_tokens: 8, stop_token_ids: [stopId], ignore_eos: true },
    });
    expect(stopped.body.output_ids).toEqual(expected);
    expect(stopped.body.meta_info.finish_reason).toEqual({ type: 'stop', matched: stopId });
    expect(stopped.body.text).toBe(visibleText(expected.slice(0, -1)));
    const kept = await generate({
      sampling_params: {
        temperature: 0,
        max_new_tokens: 8,
        stop_token_ids: [stopId],
        ignore_eos: true,
        no_stop_trim: true,
        skip_special_tokens: false,
      },
    });
    expect(kept.body.text).toBe(fixture.tokenizer.decode(expected));
    const stopText = fixture.tokenizer.decode([ids[2]!]);
    const byText = await generate({
      sampling_params: { temperature: 0, max_new_tokens: 8, stop: stopText, ignore_eos: true },
    });
    expect(byText.body.meta_info.finish_reason).toEqual({ type: 'stop', matched: stopText });
    expect(byText.body.output_ids.length).toBeLessThanOrEqual(3);
    const length = await generate({
      sampling_params: { temperature: 0, max_new_tokens: 3, ignore_eos: true },
    });
    expect(length.body.output_ids).toEqual(ids.slice(0, 3));
    expect(length.body.meta_info.finish_reason).toEqual({ type: 'length', length: 3 });
  });

  it('gives the same results for concurrent (batched) requests as for sequential ones', async () => {
    const bodies = [0, 1, 2, 3, 4, 5].map((index) => ({
      input_ids: prompt.slice(0, prompt.length - index),
      sampling_params: {
        temperature: 1,
        top_p: 0.95,
        top_k: index === 2 ? 20 : -1,
        max_new_tokens: 24 + index,
        sampling_seed: 100 + index,
        ignore_eos: true,
      },
    }));
    const sequential: GenerateResponseBody[] = [];
    for (const body of bodies) sequential.push((await generate(body)).body);
    const largest = fixture.engine.statistics.largestBatch;
    const concurrent = await Promise.all(bodies.map((body) => generate(body)));
    expect(fixture.engine.statistics.largestBatch).toBeGreaterThan(Math.max(1, largest));
    concurrent.forEach(({ body }, index) => {
      expect(body.output_ids).toEqual(sequential[index]!.output_ids);
      const diff = maxAbsDiff(
        logprobsOf(body.meta_info.output_token_logprobs),
        logprobsOf(sequential[index]!.meta_info.output_token_logprobs),
      );
      expect(diff).toBeLessThan(1e-5);
    });
  });

  it('answers bad input with 400 and a clear message, and keeps serving', async () => {
    const cases: Array<[unknown, string]> = [
      [{ sampling_params: {} }, 'input_ids'],
      [{ input_ids: [], sampling_params: {} }, 'input_ids must not be empty'],
      [{ input_ids: [1, -3] }, 'input_ids[1]'],
      [{ input_ids: [[1, 2]] }, 'input_ids[0]'],
      [{ input_ids: prompt, sampling_params: { top_p: 0 } }, 'sampling_params.top_p'],
      [{ input_ids: prompt, sampling_params: { top_k: 0 } }, 'top_k'],
      [{ input_ids: prompt, sampling_params: { temperature: 'hot' } }, 'sampling_params.temperature'],
      [{ input_ids: prompt, stream: 'yes' }, 'stream'],
      [{ input_ids: prompt, return_logprob: true, logprob_start_len: prompt.length }, 'logprob_start_len'],
    ];
    for (const [body, message] of cases) {
      const response = await postJson(`${fixture.server.url}/generate`, body);
      expect(response.status, message).toBe(400);
      expect(response.body.error!.message).toContain(message);
    }
    // A prompt the model cannot hold is a context overflow: 413 with the lengths.
    const overflow = await postJson(`${fixture.server.url}/generate`, {
      input_ids: new Array(300).fill(prompt[0]),
    });
    expect(overflow.status).toBe(413);
    expect(overflow.body.error).toMatchObject({
      code: 413,
      details: { prompt_tokens: 300, context_length: 256 },
    });
    expect(overflow.body.error!.message).toContain('context length');
    const broken = await postJson(`${fixture.server.url}/generate`, '{"input_ids": [1,');
    expect(broken.status).toBe(400);
    expect(broken.body.error!.message).toContain('not valid JSON');
    expect((await getJson(`${fixture.server.url}/nowhere`)).status).toBe(404);
    expect((await getJson(`${fixture.server.url}/generate`)).status).toBe(501);
    const ok = await generate({ sampling_params: { max_new_tokens: 2 } });
    expect(ok.status).toBe(200);
  });

  it('answers a body over the limit with 413 naming the limit, and keeps serving', async () => {
    const small = await startEngineServer({ engine: fixture.engine, maxBodyBytes: 1024 });
    try {
      const tooLarge = await postJson(`${small.url}/generate`, { input_ids: new Array(600).fill(prompt[0]) });
      expect(tooLarge.status).toBe(413);
      expect(tooLarge.body.error).toMatchObject({ code: 413, details: { limit_bytes: 1024 } });
      expect(tooLarge.body.error!.message).toContain('exceeds the limit of 1024 bytes');
      const ok = await postJson(`${small.url}/generate`, {
        input_ids: prompt.slice(0, 8),
        sampling_params: { max_new_tokens: 1 },
      });
      expect(ok.status).toBe(200);
    } finally {
      await small.close();
    }
  });

  it('streams cumulative chunks over SSE, ending with the full response and [DONE]', async () => {
    const sampling = { temperature: 1, max_new_tokens: 6, sampling_seed: 31, ignore_eos: true };
    const plain = (await generate({ sampling_params: sampling })).body;
    const response = await fetch(`${fixture.server.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input_ids: prompt,
        return_logprob: true,
        sampling_params: sampling,
        stream: true,
      }),
    });
    // As SGLang answers: Starlette appends the charset to a text/ media type (encode/starlette,
    // docs/responses.md, "appending a charset for text types").
    expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const frames = (await response.text()).split('\n\n').filter((frame) => frame !== '');
    expect(frames.at(-1)).toBe('data: [DONE]');
    const chunks = frames
      .slice(0, -1)
      .map((frame) => JSON.parse(frame.slice('data: '.length)) as GenerateResponseBody);
    expect(chunks).toHaveLength(7);
    chunks.slice(0, 6).forEach((chunk, index) => {
      expect(chunk.output_ids).toEqual(plain.output_ids.slice(0, index + 1));
      expect(chunk.meta_info.finish_reason).toBeNull();
    });
    const last = chunks.at(-1)!;
    expect(last.output_ids).toEqual(plain.output_ids);
    expect(last.meta_info.finish_reason).toEqual({ type: 'length', length: 6 });
    expect(last.meta_info.output_token_logprobs).toEqual(plain.meta_info.output_token_logprobs);
  });

  it('accepts a text prompt', async () => {
    const { status, body } = await postJson(`${fixture.server.url}/generate`, {
      text: chatPrompt('What is 12 + 30? Use the calculator.'),
      sampling_params: { temperature: 0, max_new_tokens: 4 },
    });
    expect(status).toBe(200);
    expect(body.meta_info.prompt_tokens).toBe(prompt.length);
  });
});

describe('aborts', () => {
  it('returns the partial output with logprobs, and continuing from prompt + partial reproduces them', async () => {
    const steps = fixture.engine.statistics.decodeSteps;
    const pending = generate({ sampling_params: { ...long, sampling_seed: 3 }, rid: 'to-abort' });
    await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 5);
    // The proxy's path: find HTTP workers through the router listing, abort by rid on each.
    const workers = await getJson<{
      workers: Array<{ url: string; connection_mode: string; is_healthy: boolean }>;
    }>(`${fixture.server.url}/workers`);
    expect(workers.body.workers).toHaveLength(1);
    const worker = workers.body.workers[0]!;
    expect(worker).toMatchObject({ url: fixture.server.url, connection_mode: 'http', is_healthy: true });
    const abort = await fetch(`${worker.url}/abort_request`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ rid: 'to-abort', abort_all: false }),
    });
    expect(abort.status).toBe(200);
    const { body } = await pending;
    expect(body.meta_info.finish_reason.type).toBe('abort');
    const partial = body.output_ids;
    expect(partial.length).toBeGreaterThan(0);
    expect(partial.length).toBeLessThan(200);
    expect(body.meta_info.output_token_logprobs).toHaveLength(partial.length);
    expect(body.meta_info.weight_version).toBe('v1');
    const resumed = await generate({
      input_ids: [...prompt, ...partial],
      sampling_params: { ...long, max_new_tokens: 5, sampling_seed: 9 },
      logprob_start_len: prompt.length,
    });
    const replayed = logprobsOf(resumed.body.meta_info.input_token_logprobs);
    expect(maxAbsDiff(replayed, logprobsOf(body.meta_info.output_token_logprobs))).toBeLessThan(1e-4);
    expect(
      maxAbsDiff(
        logprobsOf(resumed.body.meta_info.output_token_logprobs),
        recomputed([...prompt, ...partial], resumed.body),
      ),
    ).toBeLessThan(1e-4);
  });

  it('aborts everything with abort_all and cancels a request whose client disconnects', async () => {
    const steps = fixture.engine.statistics.decodeSteps;
    const pending = [1, 2].map((seed) => generate({ sampling_params: { ...long, sampling_seed: seed } }));
    await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 3);
    await postJson(`${fixture.server.url}/abort_request`, { abort_all: true });
    for (const { body } of await Promise.all(pending))
      expect(body.meta_info.finish_reason.type).toBe('abort');

    const aborted = fixture.engine.statistics.abortedRequests;
    const controller = new AbortController();
    const request = generate({ sampling_params: { ...long, max_new_tokens: 240 } }, controller.signal).catch(
      (error: Error) => error,
    );
    await waitFor(
      () => fixture.engine.runningCount === 1 && fixture.engine.statistics.decodeSteps > steps + 5,
    );
    controller.abort();
    expect(await request).toBeInstanceOf(Error);
    await waitFor(() => fixture.engine.statistics.abortedRequests === aborted + 1);
    await fixture.engine.idle();
    expect(fixture.engine.runningCount).toBe(0);

    // The same for a stream that is being read.
    const streamController = new AbortController();
    const stream = await fetch(`${fixture.server.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        input_ids: prompt,
        sampling_params: { ...long, max_new_tokens: 220 },
        stream: true,
      }),
      signal: streamController.signal,
    });
    const reader = stream.body!.getReader();
    await reader.read();
    streamController.abort();
    await waitFor(() => fixture.engine.statistics.abortedRequests === aborted + 2);
    await fixture.engine.idle();
    expect((await generate({ sampling_params: { max_new_tokens: 2 } })).status).toBe(200);
  });
});

describe('a failed generation', () => {
  it('is an HTTP error (an error event when streaming), never finish reason abort', async () => {
    const model = fixture.engine.model;
    const prefill = model.prefill;
    model.prefill = () => {
      throw new Error('memory access out of bounds');
    };
    try {
      const failed = await postJson<{ error: { message: string } }>(`${fixture.server.url}/generate`, {
        input_ids: prompt,
        sampling_params: { max_new_tokens: 2 },
      });
      expect(failed.status).toBe(500);
      expect(failed.body.error.message).toBe('Internal error: memory access out of bounds');
      const stream = await fetch(`${fixture.server.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ input_ids: prompt, sampling_params: { max_new_tokens: 2 }, stream: true }),
      });
      const events = (await stream.text()).split('\n\n').filter((event) => event.startsWith('data: '));
      expect(events.at(-1)).toBe('data: [DONE]');
      expect(JSON.parse(events.at(-2)!.slice(6))).toEqual({
        error: {
          message: 'Internal error: memory access out of bounds',
          type: 'InternalServerError',
          code: 500,
        },
      });
    } finally {
      model.prefill = prefill;
    }
    expect(fixture.engine.statistics.failedRequests).toBe(2);
    expect((await generate({ sampling_params: { max_new_tokens: 2 } })).status).toBe(200);
  });
});

describe('pause and continue', () => {
  it('aborts running requests by default and holds new ones until continue', async () => {
    const steps = fixture.engine.statistics.decodeSteps;
    const running = generate({ sampling_params: { ...long, sampling_seed: 4 } });
    await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 3);
    const paused = await postJson<{ status: string }>(`${fixture.server.url}/pause_generation`, {});
    expect(paused.body.status).toBe('ok');
    expect((await running).body.meta_info.finish_reason.type).toBe('abort');
    const held = generate({ sampling_params: { temperature: 0, max_new_tokens: 3 } });
    await waitFor(() => fixture.engine.waitingCount === 1);
    expect(fixture.engine.runningCount).toBe(0);
    await postJson(`${fixture.server.url}/continue_generation`, {});
    const { body } = await held;
    expect(body.meta_info.finish_reason.type).not.toBe('abort');
    expect(body.output_ids.length).toBeGreaterThan(0);
  });

  it.each(['in_place', 'retract'] as const)(
    'keeps requests in %s mode and finishes them as if never paused',
    async (mode) => {
      const sampling = { ...long, max_new_tokens: 60, sampling_seed: 21 };
      const reference = (await generate({ sampling_params: sampling })).body;
      const steps = fixture.engine.statistics.decodeSteps;
      const pending = generate({ sampling_params: sampling });
      await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 10);
      await postJson(`${fixture.server.url}/pause_generation`, { mode });
      const pausedAt = fixture.engine.statistics.decodeSteps;
      expect(await getJson(`${fixture.server.url}/flush_cache`)).toMatchObject({ status: 400 });
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(fixture.engine.statistics.decodeSteps).toBe(pausedAt);
      await postJson(`${fixture.server.url}/continue_generation`, {});
      const { body } = await pending;
      expect(body.output_ids).toEqual(reference.output_ids);
      const diff = maxAbsDiff(
        logprobsOf(body.meta_info.output_token_logprobs),
        logprobsOf(reference.meta_info.output_token_logprobs),
      );
      expect(diff).toBeLessThan(1e-4);
    },
  );
});

describe('weights', () => {
  it('updates from disk with a new version and new outputs; a bad checkpoint fails with 400', async () => {
    const sampling = { temperature: 0, max_new_tokens: 10, ignore_eos: true };
    const before = (await generate({ sampling_params: sampling })).body;
    const donor = CausalLanguageModel.create(fixture.vocabulary, { ...fixture.model.config, seed: 1234 });
    const directory = join(scratch, 'step-2');
    await saveCheckpoint(directory, donor, { weightVersion: 'ignored' });
    const update = await postJson<{ success: boolean; message: string; num_paused_requests: number }>(
      `${fixture.server.url}/update_weights_from_disk`,
      { model_path: directory, weight_version: 'v2' },
    );
    expect(update.status).toBe(200);
    expect(update.body).toMatchObject({ success: true, num_paused_requests: 0 });
    expect((await getJson(`${fixture.server.url}/get_weight_version`)).body).toEqual({
      weight_version: 'v2',
    });
    const after = (await generate({ sampling_params: sampling })).body;
    expect(after.meta_info.weight_version).toBe('v2');
    expect(after.output_ids).not.toEqual(before.output_ids);
    expect(
      maxAbsDiff(logprobsOf(after.meta_info.output_token_logprobs), recomputed(prompt, after)),
    ).toBeLessThan(1e-4);

    const missing = await postJson<{ success: boolean; message: string }>(
      `${fixture.server.url}/update_weights_from_disk`,
      {
        model_path: join(scratch, 'absent'),
      },
    );
    expect(missing.status).toBe(400);
    expect(missing.body.success).toBe(false);
    expect(missing.body.message).toContain('No embedded checkpoint');
    const wrongShape = CausalLanguageModel.create(fixture.vocabulary, {
      ...fixture.model.config,
      feedForwardDimension: 16,
    });
    await saveCheckpoint(join(scratch, 'other-shape'), wrongShape);
    const mismatch = await postJson<{ success: boolean; message: string }>(
      `${fixture.server.url}/update_weights_from_disk`,
      {
        model_path: join(scratch, 'other-shape'),
      },
    );
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.message).toContain('different model');
    expect(fixture.engine.weightVersion).toBe('v2');
    donor.dispose();
    wrongShape.dispose();
  });

  it('lets running requests finish on the old weights before swapping', async () => {
    const donor = CausalLanguageModel.create(fixture.vocabulary, { ...fixture.model.config, seed: 77 });
    const steps = fixture.engine.statistics.decodeSteps;
    const versionBefore = fixture.engine.weightVersion;
    const running = generate({ sampling_params: { ...long, max_new_tokens: 50 } });
    await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 3);
    const update = fixture.engine.updateWeights({ weights: donor.getWeights(), weightVersion: 'v3' });
    const { body } = await running;
    expect(body.meta_info.weight_version).toBe(versionBefore);
    expect(body.meta_info.finish_reason.type).toBe('length');
    await update;
    expect(fixture.engine.weightVersion).toBe('v3');
    donor.dispose();
  });
});

describe('control endpoints', () => {
  it('serves health, models, loads and flush_cache', async () => {
    const url = fixture.server.url;
    expect((await getJson(`${url}/health`)).status).toBe(200);
    expect((await getJson(`${url}/health_generate`)).status).toBe(200);
    const models = await getJson<{ data: Array<{ id: string; max_model_len: number }> }>(`${url}/v1/models`);
    expect(models.body.data[0]).toMatchObject({ id: 'dressage-embedded', max_model_len: 256 });
    expect((await getJson(`${url}/v1/loads`)).body).toMatchObject({ num_running_reqs: 0 });
    expect((await getJson(`${url}/flush_cache`)).status).toBe(200);
    expect((await getJson(`${url}/weight_version`)).body).toHaveProperty('weight_version');
  });

  it('keeps the tensor count stable across generations', async () => {
    await generate({ sampling_params: { max_new_tokens: 5 } });
    const baseline = tf.memory().numTensors;
    await Promise.all(
      [1, 2, 3].map((seed) =>
        generate({ sampling_params: { max_new_tokens: 20, sampling_seed: seed }, logprob_start_len: 0 }),
      ),
    );
    const steps = fixture.engine.statistics.decodeSteps;
    const aborted = generate({ sampling_params: { ...long, sampling_seed: 8 } });
    await waitFor(() => fixture.engine.statistics.decodeSteps >= steps + 3);
    fixture.engine.abortAll();
    await aborted;
    expect(tf.memory().numTensors).toBe(baseline);
  });
});
