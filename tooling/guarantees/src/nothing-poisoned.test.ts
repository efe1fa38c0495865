// Nothing poisoned: bad input is a clear 4xx (or gRPC INVALID_ARGUMENT) naming the field, never a
// 500 or a retryable 503; nothing non-finite reaches the weights or is recorded as if it were real;
// limits end in a clear status instead of a wait; and the servers keep serving afterwards.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  CausalLanguageModel,
  defaultSampling,
  type EmbeddedTrainerServer,
  InferenceEngine,
  initializeBackend,
  saveCheckpoint,
  startEmbeddedTrainerServer,
  TokenVocabulary,
} from '@dressage/embedded';
import {
  createSample,
  type PackedTrainBatch,
  TrainBatchHeader,
  TrainerServiceService,
  TrainResponse,
} from '@dressage/protocol';
import { ProxyClient } from '@dressage/proxy';
import {
  convertSamplesToPackedTrainBatch,
  createTrainerClient,
  type TrainerClient,
} from '@dressage/trainer-bridge';
import { createSyntheticTrainBatch } from '@dressage/trainer-bridge/internal';
import { Client, credentials, type ServiceError, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EngineStub } from './engine-stub.js';
import { chatBody, startQwenEngineStub, temporaryDirectory } from './fixtures.js';
import { call, type ProxyProcess, startProxyProcess } from './proxy-process.js';

const scratch = temporaryDirectory('dressage-nothing-poisoned-');
afterAll(() => scratch.remove());

describe('nothing poisoned: the proxy (built CLI)', () => {
  let engine: EngineStub;
  let proxy: ProxyProcess;
  const okIds: number[] = [];
  beforeAll(async () => {
    engine = await startQwenEngineStub();
    okIds.push(...engine.reply({ input_ids: [], rid: '' }).ids);
    proxy = await startProxyProcess(engine.url, [
      '--store-dir',
      'none',
      '--engine-request-timeout',
      '1',
      '--request-body-timeout',
      '1',
    ]);
  });
  afterAll(async () => {
    await proxy?.kill();
    await engine?.close();
  });

  const chat = (session: string, body: unknown = chatBody('hi')) =>
    call(proxy.url, '/v1/chat/completions', body, { 'x-session-id': session });

  it('answers a body that is not JSON with 400 and keeps serving', async () => {
    expect((await chat('bad-json', '{"messages": [')).status).toBe(400);
    expect((await chat('bad-json')).status).toBe(200);
  });

  it('answers top_k 0 with 400 naming top_k (the engine would refuse it as a 500)', async () => {
    const response = await chat('top-k', { ...chatBody('hi'), top_k: 0 });
    expect(response.status).toBe(400);
    expect(JSON.stringify(response.body)).toContain('top_k');
  });

  it('answers a message nested 10000 deep with 400 naming it, and the session still finalizes', async () => {
    const deep = `{"messages":[{"role":"user","content":"hi","x":${'['.repeat(10_000)}${']'.repeat(10_000)}}]}`;
    const refused = await chat('deep', deep);
    expect(refused.status).toBe(400);
    expect(String(refused.body.detail)).toContain('messages[0]');
    expect((await chat('deep')).status).toBe(200);
    expect((await call(proxy.url, '/session/finalize', { session_id: 'deep' })).status).toBe(200);
  });

  it('answers session ids that cannot be headers with 400, and ProxyClient neither sends nor retries them', async () => {
    for (const id of ['bad\u0001id', 'セッション']) {
      const response = await call(proxy.url, '/v1/chat/completions', { ...chatBody('hi'), session_id: id });
      expect(response.status).toBe(400);
      expect(String(response.body.detail)).toContain('session_id');
    }
    const client = new ProxyClient({ baseUrl: proxy.url, maxRetries: 3 });
    await expect(
      client.chatCompletions({ messages: [{ role: 'user', content: 'hi' }] }, { sessionId: 'セッション' }),
    ).rejects.toMatchObject({ code: 'invalid_argument' });
  });

  it('flags a null logprob from the engine instead of recording it as 0.0', async () => {
    engine.reply = () => ({ ids: okIds, logprobs: [null, -0.2] });
    try {
      expect((await chat('null-logprob')).status).toBe(200);
    } finally {
      engine.reply = () => ({ ids: okIds });
    }
    expect((await call(proxy.url, '/session/finalize', { session_id: 'null-logprob' })).status).toBe(200);
    const read = await call(proxy.url, '/trajectory/read', { trajectory_id: 'null-logprob' });
    const segment = (read.body.data as Array<{ extra_info: Record<string, unknown> }>)[0]!;
    expect(segment.extra_info.tito_logprobs_invalid).toBe(true);
  });

  it('answers 504 naming the setting when the engine hangs, and keeps serving', async () => {
    engine.reply = () => ({ ids: okIds, hang: true });
    try {
      const response = await chat('hang');
      expect(response.status).toBe(504);
      expect(JSON.stringify(response.body)).toContain('--engine-request-timeout');
    } finally {
      engine.reply = () => ({ ids: okIds });
    }
    expect((await chat('after-hang')).status).toBe(200);
  });

  it('answers a chat body over the 4 MiB default with 413 naming --max-request-mb, and keeps serving', async () => {
    // A new session's body is rendered and tokenized on the event loop: 16 MiB of agent history held
    // every other call for seconds. 4 MiB of text is already past any context window served.
    const body = Buffer.from(JSON.stringify(chatBody('word '.repeat((4 * 1024 ** 2) / 5 + 1))));
    // The answer comes from the declared length while the body is still on its way (the proxy
    // drains the rest, so the write does not meet a reset): read the answer as it comes.
    const over = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const sent = httpRequest(
        `${proxy.url}/v1/chat/completions`,
        {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'content-length': body.length,
            'x-session-id': 'too-big',
          },
        },
        (response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => {
            text += chunk.toString();
          });
          response.on('end', () => resolve({ status: response.statusCode ?? 0, text }));
        },
      );
      sent.on('error', (error) => setTimeout(() => reject(error), 1000));
      sent.end(body);
    });
    expect(over.status).toBe(413);
    expect(over.text).toContain('--max-request-mb');
    expect((await chat('after-too-big')).status).toBe(200);
  });

  it('answers 408 to a body that never finishes arriving', async () => {
    const url = new URL(proxy.url);
    const status = await new Promise<number>((resolve, reject) => {
      const request = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: '/v1/chat/completions',
          method: 'POST',
          headers: { 'content-type': 'application/json', 'content-length': '100000', 'x-session-id': 'slow' },
        },
        (response) => {
          response.resume();
          resolve(response.statusCode ?? 0);
        },
      );
      request.on('error', reject);
      request.write('{"messages": [');
    });
    expect(status).toBe(408);
    expect((await chat('after-slow')).status).toBe(200);
  });
});

describe('nothing poisoned: the embedded trainer over gRPC', () => {
  let model: CausalLanguageModel;
  let engine: InferenceEngine;
  let served: EmbeddedTrainerServer;
  let client: TrainerClient;
  let batch: PackedTrainBatch;

  beforeAll(async () => {
    await initializeBackend();
    model = CausalLanguageModel.create(new TokenVocabulary([1, 2, 3, 4, 5, 6, 7, 8]), { contextLength: 64 });
    engine = new InferenceEngine({ model, weightVersion: '0' });
    served = await startEmbeddedTrainerServer({ model, engine });
    client = createTrainerClient(served.address);
    const prompt = [1, 2, 3];
    const rollout = await engine.generate({
      rid: 'r1',
      inputIds: prompt,
      logprobStartLength: -1,
      sampling: { ...defaultSampling, temperature: 1, maxNewTokens: 6, seed: 1 },
    });
    const response = Array.from(rollout.outputIds);
    const samples = [0, 1].map((index) =>
      createSample({
        index,
        group_index: 0,
        tokens: [...prompt, ...response],
        response_length: response.length,
        loss_mask: response.map(() => 1),
        rollout_log_probs: Array.from(rollout.outputLogprobs),
        reward: index === 0 ? 1 : -1,
        metadata: { instance_id: 'prompt-0', parent_traj_id: `trajectory-${index}` },
      }),
    );
    batch = convertSamplesToPackedTrainBatch(samples, { globalBatchSize: 2 });
  });
  afterAll(async () => {
    client?.close();
    await served?.close();
    engine?.close();
    model?.dispose();
  });

  const poisoned = (edit: (copy: PackedTrainBatch) => void): PackedTrainBatch => {
    const copy: PackedTrainBatch = {
      ...batch,
      rewards: batch.rewards.slice(),
      rollout_log_probs: batch.rollout_log_probs?.slice() ?? null,
      rollout_mask_sums: batch.rollout_mask_sums.slice(),
    };
    edit(copy);
    return copy;
  };

  it.each([
    [
      'a NaN reward',
      (copy: PackedTrainBatch): void => {
        copy.rewards.fill(Number.NaN, 1);
      },
      {},
      'sample 1',
      'rewards',
    ],
    [
      'an infinite reward',
      (copy: PackedTrainBatch): void => {
        copy.rewards.fill(Number.POSITIVE_INFINITY, 0, 1);
      },
      {},
      'sample 0',
      'rewards',
    ],
    [
      'NaN rollout logprobs with use_rollout_logprobs',
      (copy: PackedTrainBatch): void => {
        copy.rollout_log_probs?.fill(Number.NaN);
      },
      { use_rollout_logprobs: true },
      'sample 0',
      'rollout_log_probs',
    ],
    [
      'a loss denominator of 1e-30 (it would scale the loss by 1e30)',
      (copy: PackedTrainBatch): void => {
        copy.rollout_mask_sums.fill(1e-30, 1);
      },
      {},
      'sample 1',
      'rollout_mask_sums',
    ],
  ] as const)(
    'refuses %s with INVALID_ARGUMENT naming the sample and field',
    async (_, edit, loss, sample, field) => {
      await expect(client.train(poisoned(edit), { loss })).rejects.toMatchObject({
        code: 'invalid_argument',
        message: expect.stringMatching(new RegExp(`${sample} .* ${field}`)),
      });
      // Nothing reached the trainer's weights: what it publishes after the refusal is all finite.
      await client.updateWeights();
      for (const values of engine.model.getWeights().values())
        expect(values.every(Number.isFinite)).toBe(true);
    },
  );

  it('refuses to load a checkpoint of diverged weights, and applies nothing of it', async () => {
    // A checkpoint written by the model's own writer with one NaN weight, as a diverged run leaves.
    const diverged = CausalLanguageModel.create(model.vocabulary, { contextLength: 64 });
    const weights = diverged.getWeights();
    const [name, values] = [...weights][0]!;
    values[1] = Number.NaN;
    diverged.setWeights(weights);
    const directory = join(scratch.path, 'diverged');
    await saveCheckpoint(directory, diverged);
    diverged.dispose();
    const before = model.getWeights();
    await expect(client.loadCheckpoint({ path: directory })).rejects.toMatchObject({
      code: 'failed_precondition',
      message: expect.stringContaining(`parameter ${name}[1] is NaN`),
    });
    for (const [key, kept] of model.getWeights()) expect(kept).toEqual(before.get(key));
    await client.updateWeights();
    for (const published of engine.model.getWeights().values())
      expect(published.every(Number.isFinite)).toBe(true);
  });

  it('refuses a Train header announcing 2^53 tokens with INVALID_ARGUMENT naming token_count', async () => {
    // The header as a client that means harm writes it: token_count 2^53 (varint 80×7 10) after a
    // well-formed header; protobuf takes the last value of a field.
    const header = Buffer.concat([
      TrainBatchHeader.encode(
        TrainBatchHeader.fromPartial({
          batch_id: 'huge',
          sample_count: 2,
          token_count: 8,
          global_batch_size: 2,
        }),
      ).finish(),
      Buffer.from([0x20, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x10]),
    ]);
    const chunk = Buffer.concat([Buffer.from([0x0a, header.length]), header]);
    const raw = new Client(served.address, credentials.createInsecure());
    const error = await new Promise<ServiceError | null>((resolve) => {
      const stream = raw.makeClientStreamRequest(
        TrainerServiceService.train.path,
        (bytes: Buffer) => bytes,
        (bytes: Buffer) => TrainResponse.decode(bytes),
        (failure) => resolve(failure),
      );
      stream.write(chunk);
      stream.end();
    });
    raw.close();
    expect(error?.code).toBe(status.INVALID_ARGUMENT);
    expect(error?.details).toContain('token_count');
    // And it keeps training on good data.
    expect((await client.train(batch)).samples_trained).toBe(2);
  });

  it('refuses a learning rate of 1e30 and a negative eps_clip with INVALID_ARGUMENT naming the field', async () => {
    await expect(client.train(batch, { loss: { learning_rate: 1e30 } })).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining('loss.learning_rate'),
    });
    await expect(client.train(batch, { loss: { eps_clip: -1 } })).rejects.toMatchObject({
      code: 'invalid_argument',
      message: expect.stringContaining('loss.eps_clip'),
    });
    // And it keeps training on good data.
    expect((await client.train(batch)).optimizer_steps).toBe(1);
  });
});

const workerRoot = join(dirname(fileURLToPath(import.meta.url)), '../../../apps/megatron-worker');
const debianPython = '/usr/bin/python3';

describe.runIf(existsSync(debianPython))('nothing poisoned: the Python worker over gRPC', () => {
  let worker: ChildProcess;
  let client: TrainerClient;

  beforeAll(async () => {
    // The recording actor: the check sits at the service boundary, the same for slime and torch.
    worker = spawn(debianPython, ['-m', 'dressage_megatron_worker', '--port', '0', '--actor', 'recording'], {
      cwd: workerRoot,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const address = await new Promise<string>((resolve, reject) => {
      let output = '';
      worker.stdout?.on('data', (data: Buffer) => {
        output += data.toString();
        const match = /listening on [\w.]+:(\d+)/.exec(output);
        if (match) resolve(`127.0.0.1:${match[1]}`);
      });
      worker.once('exit', (code) => reject(new Error(`the worker exited with ${code}`)));
    });
    client = createTrainerClient(address);
  }, 60_000);
  afterAll(() => {
    client?.close();
    worker?.kill('SIGKILL');
  });

  it.each([
    ['a NaN reward', 'rewards', 3, 'sample 3 (rollout_id'],
    ['an infinite rollout logprob', 'rollout_log_probs', 5, 'rollout_log_probs['],
    ['a loss denominator of 1e-30', 'rollout_mask_sums', 2, 'sample 2 (rollout_id'],
  ] as const)(
    'refuses %s with INVALID_ARGUMENT naming the sample and field',
    async (_, field, index, named) => {
      const batch = createSyntheticTrainBatch({ samples: 8, tokensPerSample: 32, responseTokens: 8 });
      (batch[field] as Float32Array | Float64Array)[index] =
        field === 'rewards' ? Number.NaN : field === 'rollout_mask_sums' ? 1e-30 : Number.POSITIVE_INFINITY;
      await expect(client.train(batch)).rejects.toMatchObject({
        code: 'invalid_argument',
        message: expect.stringContaining(named),
      });
      // It keeps serving, and trains a finite batch.
      const good = createSyntheticTrainBatch({ samples: 8, tokensPerSample: 32, responseTokens: 8 });
      expect((await client.train(good)).samples_trained).toBe(8);
    },
  );
});
