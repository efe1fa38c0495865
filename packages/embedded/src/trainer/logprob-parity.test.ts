// The end-to-end parity check of the embedded default: a multi-turn tool-using rollout through the
// real proxy (TITO) and the real engine over HTTP, then finalize, read, expand, convert, and Train
// over gRPC. The trainer recomputes the logprob of every trainable token with the rollout's
// weights; any token, mask or logprob out of place anywhere in the pipeline shows up as a difference.
import { expandSegmentsToSamples } from '@dressage/multi-segment';
import { createSample, type PackedTrainBatch, segmentFromRecord, segmentSchema } from '@dressage/protocol';
import { createProxyConfig, type ProxyServer, startProxyServer } from '@dressage/proxy';
import type { TitoTokenizer } from '@dressage/tito';
import {
  convertSamplesToPackedTrainBatch,
  createTrainerClient,
  type TrainerClient,
} from '@dressage/trainer-bridge';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  qwen3ModelDirectory,
  qwen3Tokenizer,
  smallConfig,
  vocabularyTexts,
} from '../__fixtures__/embedded-fixture.js';
import { initializeBackend } from '../backend.js';
import { InferenceEngine } from '../engine.js';
import { defaultEosTokenIds } from '../engine-cli.js';
import { CausalLanguageModel } from '../model.js';
import { type EngineServer, startEngineServer } from '../server.js';
import { SupervisedTrainer } from '../supervised-trainer.js';
import { buildVocabulary } from '../vocabulary.js';
import { type EmbeddedTrainerServer, startEmbeddedTrainerServer } from './trainer-server.js';

const temperature = 0.7;
const question = 'What is 12 + 30? Use the calculator.';
// The format of the Qwen3 template in force (the qwen3 family): reasoning closed by </think>, then a
// JSON tool call.
const toolCallText =
  'I will use the calculator.\n</think>\n\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call><|im_end|>';
const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  {
    type: 'function',
    function: {
      name: 'calculator',
      description: 'Evaluate an arithmetic expression',
      parameters: {
        type: 'object',
        properties: { expression: { type: 'string' } },
        required: ['expression'],
      },
    },
  },
];

let tokenizer: TitoTokenizer;
let model: CausalLanguageModel;
let engine: InferenceEngine;
let engineServer: EngineServer;
let proxy: ProxyServer;
let openai: OpenAI;

async function postProxy<T>(path: string, body: unknown): Promise<T> {
  const response = await fetch(`${proxy.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as T;
}

async function finalizeAndRead(sessionId: string) {
  await postProxy('/session/finalize', { session_id: sessionId });
  const read = await postProxy<{ data: unknown[] }>('/trajectory/read', {
    trajectory_id: sessionId,
    drain: true,
  });
  return read.data.map((segment) => segmentFromRecord(segmentSchema.parse(segment)));
}

function chat(
  sessionId: string,
  messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[],
  maxTokens: number,
) {
  return openai.chat.completions.create(
    { model: 'dressage-embedded', messages, tools, temperature, max_tokens: maxTokens },
    { headers: { 'X-Session-Id': sessionId, 'X-Instance-Id': 'calculator-1' } },
  );
}

beforeAll(async () => {
  await initializeBackend();
  tokenizer = await qwen3Tokenizer();
  const vocabulary = buildVocabulary({
    tokenizer,
    texts: [...vocabularyTexts, toolCallText, 'The answer is 42.'],
    tokenIds: tokenizer.specialTokens.values(),
  });
  // The tool schema makes the rendered prompt a few hundred tokens long.
  model = CausalLanguageModel.create(vocabulary, { ...smallConfig, contextLength: 1024 });
  engine = new InferenceEngine({
    model,
    weightVersion: 'v0',
    eosTokenIds: defaultEosTokenIds(tokenizer),
    decodeText: (ids) => tokenizer.decode(ids),
  });
  engineServer = await startEngineServer({ engine, tokenizer });
  proxy = await startProxyServer({
    ...createProxyConfig({
      tokenizerPath: qwen3ModelDirectory,
      tokenBuildModel: 'qwen3',
      host: '127.0.0.1',
      port: 0,
      storeDirectory: null,
      toolCallParseBackend: 'local',
      reasoningParseBackend: 'local',
      streamHeartbeatIntervalSeconds: 0,
    }),
    sglangRouterUrl: engineServer.url,
  });
  openai = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey: 'unused', maxRetries: 0 });

  // Warm-start so the first turn is a tool call: learn the tool-call text after the exact prompt
  // the proxy renders (read back from a one-token probe session).
  await chat('probe', [{ role: 'user', content: question }], 1);
  const [probe] = await finalizeAndRead('probe');
  const promptLength = probe!.full_loss_mask.indexOf(1);
  const prompt = Array.from(probe!.tokens.subarray(0, promptLength));
  const answer = Array.from(tokenizer.encode(toolCallText));
  const warmStart = new SupervisedTrainer(model, { learningRate: 1e-2 });
  const example = {
    tokenIds: [...prompt, ...answer],
    lossMask: [...prompt.map(() => 0), ...answer.map(() => 1)],
  };
  let loss = Number.POSITIVE_INFINITY;
  for (let step = 0; step < 400 && loss > 1e-3; step++) loss = warmStart.step([example]).loss;
  warmStart.dispose();
  await engine.updateWeights({ weights: model.getWeights(), weightVersion: 'v1' });
  // Up to 400 supervised steps: a minute on an idle 2-core machine, several when it is shared.
}, 600_000);

afterAll(async () => {
  await proxy?.close();
  await engineServer?.close();
  engine?.close();
  model?.dispose();
});

describe('logprob parity, end to end', () => {
  let served: EmbeddedTrainerServer;
  let client: TrainerClient;
  let batch: PackedTrainBatch;
  let outputTokens = 0;

  beforeAll(async () => {
    // The trainer starts from the weights that generate the rollout.
    served = await startEmbeddedTrainerServer({ model, engine, temperature, learningRate: 1e-3 });
    client = createTrainerClient(served.address);
  });

  afterAll(async () => {
    client?.close();
    await served?.close();
  });

  it('rolls out a tool-using conversation through the proxy and the engine', async () => {
    const sessionId = 'parity-1';
    const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
      { role: 'user', content: question },
    ];
    const first = await chat(sessionId, messages, 64);
    const reply = first.choices[0]!;
    expect(reply.finish_reason).toBe('tool_calls');
    const call = reply.message.tool_calls![0]!;
    if (call.type !== 'function') throw new Error('a function call was expected');
    expect(call.function.name).toBe('calculator');
    messages.push(reply.message, { role: 'tool', tool_call_id: call.id, content: '42' });
    const second = await chat(sessionId, messages, 24);
    outputTokens = first.usage!.completion_tokens + second.usage!.completion_tokens;

    const segments = await finalizeAndRead(sessionId);
    // One lineage: the second prompt extends the first prompt and output token for token.
    expect(segments).toHaveLength(1);
    const template = createSample({
      index: 0,
      group_index: 0,
      session_id: sessionId,
      metadata: { instance_id: 'calculator-1' },
    });
    const samples = expandSegmentsToSamples(template, segments);
    samples.at(-1)!.reward = 1;
    batch = convertSamplesToPackedTrainBatch(samples, { globalBatchSize: 1 });
    // Both turns are trainable; the tool result between them is context.
    expect(batch.loss_masks.reduce((sum, mask) => sum + mask, 0)).toBe(outputTokens);
    const toolResponse = tokenizer.requireTokenId('<tool_response>');
    const responseStart = batch.tokens.length - batch.response_lengths.at(-1)!;
    const toolAt = batch.tokens.indexOf(toolResponse, responseStart) - responseStart;
    expect(toolAt).toBeGreaterThan(0);
    expect(batch.loss_masks[batch.loss_masks.length - batch.response_lengths.at(-1)! + toolAt]).toBe(0);
  });

  it('recomputes every trainable token’s rollout logprob within 1e-4 in Train', async () => {
    // A single sample at a temperature below 1, with logprobs far from 0: a real check.
    const trainable = batch.rollout_log_probs!.filter((_, index) => batch.loss_masks[index] === 1);
    expect(trainable.some((logprob) => logprob < -1e-3)).toBe(true);
    const response = await client.train(batch, { loss: { learning_rate: 1e-3 } });
    expect(response.tokens_trained).toBe(outputTokens);
    expect(response.optimizer_steps).toBe(1);
    expect(response.metrics.train_rollout_logprob_abs_diff_max).toBeLessThanOrEqual(1e-4);
    expect(response.metrics.train_rollout_logprob_abs_diff).toBeLessThanOrEqual(1e-4);
    console.info(
      `logprob parity over ${outputTokens} trainable tokens: max |diff| ${response.metrics.train_rollout_logprob_abs_diff_max}, mean ${response.metrics.train_rollout_logprob_abs_diff}`,
    );
  });

  it("hands the caller every trainable token's recomputed logprob, in the batch's order", async () => {
    let received: Float32Array | null = null;
    const check = await startEmbeddedTrainerServer({
      model,
      temperature,
      onTrainLogProbs: (logProbs) => {
        received = logProbs;
      },
    });
    const checkClient = createTrainerClient(check.address);
    try {
      await checkClient.train(batch);
      const logProbs = received as Float32Array | null;
      expect(logProbs).toHaveLength(batch.loss_masks.length);
      const rollout = batch.rollout_log_probs!;
      batch.loss_masks.forEach((mask, index) => {
        if (mask === 0) expect(logProbs![index]).toBeNaN();
        else expect(Math.abs(logProbs![index]! - rollout[index]!)).toBeLessThanOrEqual(1e-4);
      });
    } finally {
      checkClient.close();
      await check.close();
    }
  });

  it('catches a one-token misalignment of the rollout logprobs', async () => {
    // Same weights as the rollout (the served engine's model), through a fresh trainer.
    const check = await startEmbeddedTrainerServer({ model, temperature });
    const checkClient = createTrainerClient(check.address);
    try {
      const logprobs = batch.rollout_log_probs!;
      const shifted = new Float32Array(logprobs.length);
      shifted.set(logprobs.subarray(1));
      const response = await checkClient.train({ ...batch, rollout_log_probs: shifted });
      expect(response.metrics.train_rollout_logprob_abs_diff_max).toBeGreaterThan(1e-2);
      // The wrong temperature shows up too.
      const hot = await startEmbeddedTrainerServer({ model, temperature: 1 });
      const hotClient = createTrainerClient(hot.address);
      try {
        const unscaled = await hotClient.train(batch);
        expect(unscaled.metrics.train_rollout_logprob_abs_diff_max).toBeGreaterThan(1e-3);
      } finally {
        hotClient.close();
        await hot.close();
      }
    } finally {
      checkClient.close();
      await check.close();
    }
  });
});
