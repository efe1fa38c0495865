import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  DressageError,
  type SglangGenerateResponse,
  type SglangLogprobEntry,
  type SglangMetaInfo,
  safeParseWire,
} from '@dressage/protocol';
import {
  httpStatusOf,
  parseJsonBody,
  RouteTable,
  readBody,
  requestPath,
  SseWriter,
  sendJson,
  serve,
  sseDoneFrame,
  sseFrame,
} from '@dressage/protocol/http';
import type { z } from 'zod';
import { loadWeightsFor } from './checkpoint.js';
import {
  defaultSampling,
  type EngineFinishReason,
  type GenerationRequest,
  type GenerationResult,
  type InferenceEngine,
} from './engine.js';
import {
  abortRequestSchema,
  type GenerateRequestBody,
  generateRequestSchema,
  pauseGenerationRequestSchema,
  updateWeightsRequestSchema,
} from './schemas.js';
import { disposeCache } from './sequence-cache.js';

/** What the server needs of a tokenizer (a `TitoTokenizer` fits). */
export interface ServerTokenizer {
  encode(text: string): ArrayLike<number>;
  decode(ids: ArrayLike<number>): string;
  readonly specialTokens: ReadonlyMap<string, number>;
}

/** Options of {@link startEngineServer}. */
export interface EngineServerOptions {
  engine: InferenceEngine;
  /** Decodes `text` of responses and encodes `text` prompts. Without it, `text` is empty. */
  tokenizer?: ServerTokenizer;
  /** The served model's name (`/v1/models`, `/workers`). Default `dressage-embedded`. */
  modelName?: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0 (any free port). */
  port?: number;
  /** The URL `/workers` advertises; default `http://host:port` as bound. */
  advertisedUrl?: string;
  /** Largest request body in bytes (a larger one is answered 413). Default 64 MiB. */
  maxBodyBytes?: number;
}

/** A running engine server. */
export interface EngineServer {
  /** Base URL, e.g. `http://127.0.0.1:30000`. */
  readonly url: string;
  readonly server: Server;
  /** Aborts held requests, stops listening and closes connections. The engine stays open. */
  close(): Promise<void>;
}

type Handler = (context: RequestContext) => Promise<void> | void;

/** A finished result, or a streaming chunk's view of one (no finish reason yet). */
type ResponseSnapshot = Omit<GenerationResult, 'finishReason'> & { finishReason: EngineFinishReason | null };

interface RequestContext {
  request: IncomingMessage;
  response: ServerResponse;
  body: () => Promise<unknown>;
}

function sendError(response: ServerResponse, error: unknown): void {
  const failure = DressageError.from(error, 'internal');
  const status = httpStatusOf(failure);
  sendJson(response, status, {
    error: {
      message: failure.message,
      type: failure.code,
      code: status,
      details: failure.details,
    },
  });
}

function parse<TSchema extends z.ZodType>(schema: TSchema, value: unknown, what: string): z.infer<TSchema> {
  const result = safeParseWire(schema, value, what);
  if (!result.success) throw result.error;
  return result.data as z.infer<TSchema>;
}

function logprobEntries(
  logprobs: Float32Array,
  ids: ArrayLike<number>,
  tokenizer: ServerTokenizer | undefined,
  withText: boolean,
): SglangLogprobEntry[] {
  const entries: SglangLogprobEntry[] = [];
  for (let index = 0; index < logprobs.length; index++) {
    const value = logprobs[index]!;
    const id = ids[index]!;
    entries.push([
      Number.isNaN(value) ? null : value,
      id,
      withText && tokenizer !== undefined ? tokenizer.decode([id]) : null,
    ]);
  }
  return entries;
}

/** What the engine server's routes read: the engine, its tokenizer and how the server presents itself. */
interface EngineServerContext {
  engine: InferenceEngine;
  tokenizer: ServerTokenizer | undefined;
  modelName: string;
  workerId: string;
  createdAt: number;
  /** Ids `skip_special_tokens` leaves out of the text. */
  specialIds: ReadonlySet<number>;
  /** The URL `/workers` advertises: given, or the listening address once known. */
  advertisedUrl: string;
}

type Routes = Record<string, Partial<Record<'GET' | 'POST', Handler>>>;

// The text of an answer as SGLang writes it: the matched stop token or string trimmed unless
// `no_stop_trim`, special tokens left out with `skip_special_tokens`.
function responseText(
  context: EngineServerContext,
  result: ResponseSnapshot,
  skipSpecial: boolean,
  noStopTrim: boolean,
): string {
  const { tokenizer, specialIds } = context;
  if (tokenizer === undefined) return '';
  let ids = Array.from(result.outputIds);
  const { finishReason } = result;
  if (!noStopTrim && finishReason?.type === 'stop' && typeof finishReason.matched === 'number') {
    ids = ids.slice(0, -1);
  }
  if (skipSpecial) ids = ids.filter((id) => !specialIds.has(id));
  let text = ids.length === 0 ? '' : tokenizer.decode(ids);
  if (!noStopTrim && finishReason?.type === 'stop' && typeof finishReason.matched === 'string') {
    const at = text.indexOf(finishReason.matched);
    if (at >= 0) text = text.slice(0, at);
  }
  return text;
}

// A `/generate` body as the engine's request: ids (or the text encoded), sampling with SGLang's defaults.
function generationRequestOf(context: EngineServerContext, body: GenerateRequestBody): GenerationRequest {
  const { tokenizer } = context;
  const sampling = body.sampling_params ?? {};
  let inputIds: ArrayLike<number>;
  if (body.input_ids !== undefined) inputIds = body.input_ids;
  else if (tokenizer !== undefined) inputIds = tokenizer.encode(body.text ?? '');
  else
    throw new DressageError({
      code: 'invalid_argument',
      message: 'text prompts need an engine with a tokenizer',
    });
  const stop = sampling.stop ?? [];
  return {
    rid: body.rid ?? randomUUID().replaceAll('-', ''),
    inputIds,
    sampling: {
      temperature: sampling.temperature ?? defaultSampling.temperature,
      topP: sampling.top_p ?? defaultSampling.topP,
      topK: sampling.top_k ?? defaultSampling.topK,
      maxNewTokens: sampling.max_new_tokens ?? defaultSampling.maxNewTokens,
      stopTokenIds: sampling.stop_token_ids ?? [],
      stop: typeof stop === 'string' ? [stop] : stop,
      ignoreEos: sampling.ignore_eos ?? false,
      seed: sampling.sampling_seed ?? null,
    },
    logprobStartLength: body.return_logprob ? (body.logprob_start_len ?? -1) : -1,
  };
}

// An answer (or a streamed chunk's view of one) in SGLang's shape.
function renderGenerateResponse(
  context: EngineServerContext,
  parsed: GenerateRequestBody,
  generation: GenerationRequest,
  snapshot: ResponseSnapshot,
): SglangGenerateResponse {
  const { tokenizer } = context;
  const sampling = parsed.sampling_params ?? {};
  const withText = parsed.return_text_in_logprobs ?? false;
  const metaInfo: SglangMetaInfo = {
    id: snapshot.rid,
    finish_reason: snapshot.finishReason,
    prompt_tokens: snapshot.promptTokens,
    completion_tokens: snapshot.outputIds.length,
    cached_tokens: 0,
    weight_version: snapshot.weightVersion,
    e2e_latency: snapshot.latencySeconds,
  };
  if (parsed.return_logprob) {
    metaInfo.output_token_logprobs = logprobEntries(
      snapshot.outputLogprobs,
      snapshot.outputIds,
      tokenizer,
      withText,
    );
    if (snapshot.inputLogprobs !== null) {
      const ids = Array.from(generation.inputIds).slice(generation.logprobStartLength);
      metaInfo.input_token_logprobs = logprobEntries(snapshot.inputLogprobs, ids, tokenizer, withText);
    }
  }
  return {
    text: responseText(
      context,
      snapshot,
      sampling.skip_special_tokens ?? true,
      sampling.no_stop_trim ?? false,
    ),
    output_ids: Array.from(snapshot.outputIds),
    meta_info: metaInfo,
  };
}

// `/generate`, streamed (SSE of cumulative chunks) or not.
function generateRoutes(context: EngineServerContext): Routes {
  const { engine } = context;
  return {
    '/generate': {
      POST: async ({ response, body }) => {
        const parsed = parse(generateRequestSchema, await body(), 'generate request');
        const generation = generationRequestOf(context, parsed);
        const render = (snapshot: ResponseSnapshot) =>
          renderGenerateResponse(context, parsed, generation, snapshot);
        const startedAt = performance.now();
        const stream = parsed.stream ? new SseWriter(response) : null;
        if (stream !== null) {
          // SSE with cumulative chunks, as SGLang streams by default.
          const outputIds: number[] = [];
          const outputLogprobs: number[] = [];
          generation.onToken = (tokenId, logprob) => {
            outputIds.push(tokenId);
            outputLogprobs.push(logprob);
            const chunk = render({
              rid: generation.rid,
              outputIds: Int32Array.from(outputIds),
              outputLogprobs: Float32Array.from(outputLogprobs),
              inputLogprobs: null,
              finishReason: null,
              weightVersion: engine.weightVersion,
              promptTokens: generation.inputIds.length,
              latencySeconds: (performance.now() - startedAt) / 1000,
            });
            stream.send(chunk);
          };
        }
        const pending = engine.generate(generation);
        // A client that hangs up cancels its generation at the next token boundary.
        const onClose = () => {
          if (!response.writableFinished) engine.abort(generation.rid, 'Client disconnected');
        };
        response.on('close', onClose);
        // The headers go out before the first token: a slow prefill does not look like a dead server.
        stream?.start();
        const result = await pending;
        response.off('close', onClose);
        // A failed generation is an HTTP error (an `error` event when streaming), as SGLang answers
        // a request its scheduler could not serve; a finish reason `abort` would read as a preemption.
        const failure =
          result.finishReason.type === 'error'
            ? { error: { message: result.finishReason.message, type: 'InternalServerError', code: 500 } }
            : null;
        if (stream !== null) {
          stream.end(`${sseFrame(failure ?? render(result))}${sseDoneFrame}`);
          return;
        }
        if (failure) {
          sendJson(response, 500, failure);
          return;
        }
        sendJson(response, 200, render(result));
      },
    },
  };
}

// Aborts, pause and continue, weight updates and the cache flush.
function controlRoutes(context: EngineServerContext): Routes {
  const { engine } = context;
  return {
    '/abort_request': {
      POST: async ({ response, body }) => {
        const parsed = parse(abortRequestSchema, await body(), 'abort request');
        if (parsed.abort_all) engine.abortAll();
        else engine.abort(parsed.rid!);
        sendJson(response, 200, undefined);
      },
    },
    '/pause_generation': {
      POST: async ({ response, body }) => {
        const parsed = parse(pauseGenerationRequestSchema, await body(), 'pause request');
        engine.pause(parsed.mode ?? 'abort');
        sendJson(response, 200, { message: 'Generation paused successfully.', status: 'ok' });
      },
    },
    '/continue_generation': {
      POST: async ({ response, body }) => {
        await body();
        engine.resume();
        sendJson(response, 200, { message: 'Generation continued successfully.', status: 'ok' });
      },
    },
    '/update_weights_from_disk': {
      POST: async ({ response, body }) => {
        const parsed = parse(updateWeightsRequestSchema, await body(), 'update_weights_from_disk request');
        try {
          const requested = parsed.weight_version;
          const { pausedRequests } = await engine.updateWeights(
            async () => {
              const checkpoint = await loadWeightsFor(engine.model, parsed.model_path);
              const weightVersion =
                requested === undefined || requested === null ? checkpoint.weightVersion : String(requested);
              return { weights: checkpoint.weights, weightVersion };
            },
            { abortAllRequests: parsed.abort_all_requests ?? false },
          );
          sendJson(response, 200, {
            success: true,
            message: 'Succeeded to update model weights.',
            num_paused_requests: pausedRequests,
          });
        } catch (error) {
          const failure = DressageError.from(error);
          sendJson(response, 400, { success: false, message: failure.message, num_paused_requests: 0 });
        }
      },
    },
    '/flush_cache': {
      GET: ({ response }) => flushCache(engine, response),
      POST: ({ response }) => flushCache(engine, response),
    },
  };
}

function flushCache(engine: InferenceEngine, response: ServerResponse): void {
  if (engine.flushCache()) sendJson(response, 200, { message: 'Cache flushed.', success: true });
  else
    sendJson(response, 400, {
      message: 'Cannot flush the cache while requests are running or waiting.',
      success: false,
    });
}

// Health, weight version, models, loads, server info and the router's worker listing.
function informationRoutes(context: EngineServerContext): Routes {
  const { engine, modelName, createdAt, workerId } = context;
  return {
    '/get_weight_version': {
      GET: ({ response }) => sendJson(response, 200, { weight_version: engine.weightVersion }),
    },
    '/weight_version': {
      GET: ({ response }) => sendJson(response, 200, { weight_version: engine.weightVersion }),
    },
    '/health': { GET: ({ response }) => sendJson(response, 200, undefined) },
    '/health_generate': {
      GET: ({ response }) => {
        // A one-token forward pass proves the model computes; a running batch proves it already.
        if (engine.runningCount === 0) {
          const { cache, logits } = engine.model.prefill(Int32Array.of(0));
          logits.dispose();
          disposeCache(cache);
        }
        sendJson(response, 200, undefined);
      },
    },
    '/v1/models': {
      GET: ({ response }) =>
        sendJson(response, 200, {
          object: 'list',
          data: [
            {
              id: modelName,
              object: 'model',
              created: createdAt,
              owned_by: 'dressage',
              root: modelName,
              max_model_len: engine.model.config.contextLength,
            },
          ],
        }),
    },
    '/v1/loads': {
      GET: ({ response }) =>
        sendJson(response, 200, {
          num_running_reqs: engine.runningCount,
          num_waiting_reqs: engine.waitingCount,
          num_total_reqs: engine.runningCount + engine.waitingCount,
        }),
    },
    '/get_server_info': {
      GET: ({ response }) =>
        sendJson(response, 200, {
          model_path: modelName,
          served_model_name: modelName,
          context_length: engine.model.config.contextLength,
          max_running_requests: engine.maxBatchSize,
          weight_version: engine.weightVersion,
          paused: engine.paused,
          statistics: engine.statistics,
        }),
    },
    '/workers': {
      GET: ({ response }) =>
        sendJson(response, 200, {
          workers: [
            {
              id: workerId,
              url: context.advertisedUrl,
              model_id: modelName,
              worker_type: 'regular',
              connection_mode: 'http',
              is_healthy: true,
              load: engine.runningCount + engine.waitingCount,
              priority: 50,
              cost: 1,
            },
          ],
          total: 1,
          stats: { prefill_count: 0, decode_count: 0, regular_count: 1 },
        }),
    },
  };
}

/**
 * Starts the SGLang-compatible HTTP server of an {@link InferenceEngine}: `/generate`,
 * `/abort_request`, `/pause_generation`, `/continue_generation`, `/update_weights_from_disk`,
 * `/get_weight_version`, `/flush_cache`, `/health`, `/health_generate`, `/v1/models`, `/v1/loads`,
 * `/get_server_info`, and the router's `/workers` listing (the engine lists itself, so a client's
 * abort-by-worker path works without a router).
 *
 * @example
 * ```ts
 * const server = await startEngineServer({ engine, tokenizer, port: 30000 });
 * const response = await fetch(`${server.url}/generate`, {
 *   method: 'POST',
 *   body: JSON.stringify({ input_ids: [9707, 1879], sampling_params: { max_new_tokens: 8 }, return_logprob: true }),
 * });
 * ```
 */
export async function startEngineServer(options: EngineServerOptions): Promise<EngineServer> {
  const { engine, tokenizer } = options;
  const maxBodyBytes = options.maxBodyBytes ?? 64 * 1024 * 1024;
  const context: EngineServerContext = {
    engine,
    tokenizer,
    modelName: options.modelName ?? 'dressage-embedded',
    workerId: randomUUID(),
    createdAt: Math.floor(Date.now() / 1000),
    specialIds: new Set(tokenizer?.specialTokens.values() ?? []),
    advertisedUrl: options.advertisedUrl ?? '',
  };
  const routes: Routes = {
    ...generateRoutes(context),
    ...controlRoutes(context),
    ...informationRoutes(context),
  };

  const table = new RouteTable<Handler>();
  for (const [path, methods] of Object.entries(routes)) {
    for (const [method, handler] of Object.entries(methods)) table.add(method, path, handler);
  }

  const server = createServer(
    serve(table, {
      invoke: (handler, request, response) =>
        handler({
          request,
          response,
          body: async () => parseJsonBody(await readBody(request, { limit: maxBodyBytes, response })),
        }),
      notFound: (request, _response, miss) => {
        request.resume();
        const path = requestPath(request.url);
        throw new DressageError({
          code: miss.kind === 'not_found' ? 'not_found' : 'unimplemented',
          message:
            miss.kind === 'not_found' ? `No route ${path}` : `${request.method} is not allowed on ${path}`,
        });
      },
      onError: (error, _request, response) => sendError(response, error),
    }),
  );
  server.keepAliveTimeout = 65_000;

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host}:${address.port}`;
  if (context.advertisedUrl === '') context.advertisedUrl = url;

  return {
    url,
    server,
    close: async () => {
      engine.abortAll('Server shutting down');
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
