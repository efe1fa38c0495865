import {
  DressageError,
  type SglangGenerateRequest,
  type SglangLogprobEntry,
  type SglangSamplingParams,
  sglangGenerateResponseSchema,
} from '@dressage/protocol';
import { codeOfHttpStatus } from '@dressage/protocol/http';
import { Agent, type Dispatcher, request } from 'undici';
import { z } from 'zod';
import { ProxyHttpError } from './http-error.js';
import { IdsBodyCache } from './ids-body-cache.js';
import type { PromptIds } from './prompt-ids.js';

/**
 * A `/generate` request as the proxy sends it: protocol's `SglangGenerateRequest`, with the prompt ids
 * in a typed array (written straight into the body) and logprobs always asked for.
 */
export type GenerateRequest = Omit<SglangGenerateRequest, 'input_ids' | 'text' | 'sampling_params'> & {
  /** A typed array, or a prompt whose history is read from its token buffer. */
  input_ids: Int32Array | PromptIds;
  sampling_params: SglangSamplingParams;
  return_logprob: true;
  logprob_start_len: number;
  return_text_in_logprobs: true;
  rid: string;
};

/** What one `/generate` call produced, with token data in typed arrays. */
export interface EngineGenerateResult {
  text: string;
  /** Output ids; null when the engine sent neither `output_ids` nor id-bearing logprobs. */
  outputIds: Int32Array | null;
  /** Logprob of every output token (as many as the engine sent); 0 where the engine sent none. */
  outputLogprobs: Float32Array;
  /**
   * True when an output logprob was null, missing or not finite (an engine serving NaN weights sends
   * null): those tokens are recorded with 0 and their segments flagged `*_logprobs_invalid`.
   */
  outputLogprobsInvalid: boolean;
  /** Prompt logprobs when requested with `logprob_start_len` 0 (first entry is null in SGLang). */
  inputLogprobs: Float32Array | null;
  /** `meta_info.weight_version` (or `meta_info.version`), null when absent. */
  weightVersion: string | null;
  /** `meta_info.finish_reason.type`, null when absent. */
  finishReason: string | null;
  /** `meta_info.finish_reason.message` (why the engine stopped, e.g. its internal error), null when absent. */
  finishMessage: string | null;
  /** Base64 routed-expert ids (little-endian int32) when R3 is on. */
  routedExperts: string | null;
  /** `meta_info.routed_experts_start_len`: the first token position the routed experts cover (0 when absent). */
  routedExpertsStart: number;
}

// The router's and the workers' auxiliary answers, decoded leniently: a field of an unexpected type
// reads as absent (the caller then falls back), never as a failed call.
const lenient = <T extends z.ZodType>(schema: T) => schema.optional().catch(undefined);

// `GET /workers`: a list (or `{workers: [...]}`) of URLs or of objects naming one.
const routerWorkersSchema = z.union([
  z.array(z.unknown()),
  z.looseObject({ workers: z.array(z.unknown()) }).transform((value) => value.workers),
  z.unknown().transform((): unknown[] => []),
]);
const routerWorkerSchema = z.looseObject({
  url: lenient(z.string()),
  worker_url: lenient(z.string()),
  is_healthy: z.unknown().optional(),
  healthy: z.unknown().optional(),
  connection_mode: z.unknown().optional(),
});

/** `GET /get_weight_version` of a worker. */
const workerWeightVersionSchema = z.looseObject({
  weight_version: z.unknown().optional(),
  version: z.unknown().optional(),
});

/** The body of `POST /parse_function_call`. */
export interface ParseFunctionCallRequest {
  text: string;
  tool_call_parser: string;
  tools: readonly unknown[];
}

/** One call of a `/parse_function_call` answer: SGLang sends `parameters` as a JSON string. */
const parsedFunctionCallSchema = z.looseObject({
  name: lenient(z.string()),
  parameters: z.unknown().optional(),
  arguments: z.unknown().optional(),
});

/** A `/parse_function_call` answer: the text outside the calls and the calls. */
export const parseFunctionCallAnswerSchema = z.looseObject({
  normal_text: lenient(z.string()),
  calls: z.array(z.union([parsedFunctionCallSchema, z.unknown().transform(() => null)])),
});

/** A `/parse_function_call` answer. */
export type ParseFunctionCallAnswer = z.infer<typeof parseFunctionCallAnswerSchema>;

/** The body of `POST /separate_reasoning`. */
export interface SeparateReasoningRequest {
  text: string;
  reasoning_parser: string;
}

/** A `/separate_reasoning` answer: the text without its reasoning, and the reasoning. */
export const separateReasoningAnswerSchema = z.looseObject({
  text: z.string(),
  reasoning_text: z.unknown().optional(),
  reasoning_content: z.unknown().optional(),
});

/** A `/separate_reasoning` answer. */
export type SeparateReasoningAnswer = z.infer<typeof separateReasoningAnswerSchema>;

/** A worker behind the router as `GET /workers` lists it. */
export interface EngineWorker {
  url: string;
  healthy: boolean;
  connectionMode: string;
}

/** Result of aborting one request id. */
export interface AbortOutcome {
  rid: string;
  succeeded: boolean;
  error: string | null;
}

/** Options of {@link EngineClient}. */
export interface EngineClientOptions {
  /** The router (or a single engine) base URL. */
  routerUrl: string;
  /** Keep-alive connections per origin. Default 512. */
  connections?: number;
  /** Timeout of a `/generate` call in seconds; null waits as long as it takes. */
  generateTimeoutSeconds?: number | null;
}

// Per-call timeouts of control requests: they are small and must not hang a pause.
const controlTimeoutMs = 5000;

function toVersion(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  return typeof value === 'string' ? value : String(value);
}

function upstreamUnavailable(error: unknown, timeoutMs: number): ProxyHttpError {
  const text = error instanceof Error ? `${error.name}(${JSON.stringify(error.message)})` : String(error);
  const code = (error as { code?: string } | null)?.code;
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    const message = `the engine did not answer /generate within ${timeoutMs / 1000} s (--engine-request-timeout)`;
    return new ProxyHttpError({
      status: 504,
      body: { detail: { error: 'sglang_upstream_timeout', message } },
      message,
      cause: error,
    });
  }
  return new ProxyHttpError({
    status: 503,
    body: { detail: { error: 'sglang_upstream_unavailable', detail: text } },
    cause: error,
  });
}

function isAbortError(error: unknown): boolean {
  return (
    error instanceof Error &&
    (error.name === 'AbortError' || (error as { code?: string }).code === 'UND_ERR_ABORTED')
  );
}

/** Decodes SGLang's `[[logprob, id, text], ...]` into typed arrays without keeping per-token objects. */
// Logprobs and ids of checked entries into typed arrays. A null logprob (an engine serving NaN weights
// sends null) is recorded as 0 and flags the output.
function decodeLogprobEntries(entries: readonly SglangLogprobEntry[] | undefined): {
  logprobs: Float32Array;
  ids: Int32Array;
  invalid: boolean;
} {
  if (entries === undefined) return { logprobs: new Float32Array(0), ids: new Int32Array(0), invalid: false };
  const logprobs = new Float32Array(entries.length);
  const ids = new Int32Array(entries.length);
  let invalid = false;
  for (let index = 0; index < entries.length; index++) {
    const entry = entries[index] as SglangLogprobEntry;
    const logprob = entry[0];
    if (logprob !== null && logprob - logprob === 0) logprobs[index] = logprob;
    else invalid = true;
    ids[index] = entry[1];
  }
  return { logprobs, ids, invalid };
}

/**
 * The engine client: SGLang's HTTP API through its router, over keep-alive connection pools.
 *
 * @example
 * ```ts
 * const engine = new EngineClient({ routerUrl: 'http://127.0.0.1:8000' });
 * const result = await engine.generate(request, { routingKey: sessionId });
 * ```
 */
export class EngineClient {
  /** The router base URL, without a trailing slash. */
  readonly routerUrl: string;
  readonly #dispatcher: Dispatcher;
  readonly #generateTimeoutMs: number;
  readonly #origin: string;
  readonly #basePath: string;
  // The previous body of each history, continued by its next one (only the new ids are written).
  readonly #bodies = new IdsBodyCache();

  constructor(options: EngineClientOptions) {
    this.routerUrl = options.routerUrl.replace(/\/+$/, '');
    const url = new URL(this.routerUrl);
    this.#origin = url.origin;
    this.#basePath = url.pathname.replace(/\/+$/, '');
    this.#dispatcher = new Agent({
      connections: options.connections ?? 512,
      keepAliveTimeout: 60_000,
      keepAliveMaxTimeout: 600_000,
      pipelining: 1,
    });
    this.#generateTimeoutMs = options.generateTimeoutSeconds ? options.generateTimeoutSeconds * 1000 : 0;
  }

  /**
   * `POST /generate` with `X-SMG-Routing-Key` for sticky routing. The body is written as bytes,
   * `input_ids` straight from the typed array.
   *
   * @throws ProxyHttpError 503 `sglang_upstream_unavailable` on connection errors, 504
   *   `sglang_upstream_timeout` past `generateTimeoutSeconds`, 500 on an HTTP error status.
   */
  async generate(
    body: GenerateRequest,
    options: { routingKey: string; signal?: AbortSignal },
  ): Promise<EngineGenerateResult> {
    const { input_ids: inputIds, ...rest } = body;
    const json = this.#bodies.body('{"input_ids":[', inputIds, `],${JSON.stringify(rest).slice(1)}`);
    let reply: { statusCode: number; body: Buffer };
    try {
      reply = await this.#post('/generate', json.bytes, options.routingKey, options.signal);
    } catch (error) {
      json.release(false);
      throw error;
    }
    // A 2xx answer means the engine read the whole body: its bytes may be continued by the next one.
    json.release(reply.statusCode >= 200 && reply.statusCode < 300);
    if (reply.statusCode >= 400) {
      throw new ProxyHttpError({
        status: 500,
        body: {
          detail: `SGLang /generate returned HTTP ${reply.statusCode}: ${reply.body.toString('utf8', 0, 2048).slice(0, 500)}`,
        },
      });
    }
    let payload: unknown;
    try {
      payload = JSON.parse(reply.body.toString('utf8'));
    } catch (error) {
      throw new ProxyHttpError({
        status: 500,
        body: {
          detail: `SGLang /generate returned invalid JSON: ${(error as Error).message}`,
        },
      });
    }
    return generateResultOf(payload);
  }

  // The hot path's POST through undici's dispatcher with a plain handler: no response stream, no
  // header parsing and no per-request URL parsing (about 20 µs a call less than `request()`).
  #post(
    path: string,
    body: string | Buffer,
    routingKey: string,
    signal: AbortSignal | undefined,
  ): Promise<{ statusCode: number; body: Buffer }> {
    const generateTimeoutMs = this.#generateTimeoutMs;
    return new Promise((resolve, reject) => {
      if (signal?.aborted) {
        reject(signal.reason);
        return;
      }
      const chunks: Buffer[] = [];
      let statusCode = 0;
      let abortRequest: ((reason?: Error) => void) | null = null;
      const onAbort = () => abortRequest?.(signal!.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      const finish = () => signal?.removeEventListener('abort', onAbort);
      this.#dispatcher.dispatch(
        {
          origin: this.#origin,
          path: this.#basePath + path,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-smg-routing-key': routingKey },
          body,
          headersTimeout: this.#generateTimeoutMs,
          bodyTimeout: this.#generateTimeoutMs,
        },
        {
          onConnect(abort) {
            abortRequest = abort;
          },
          onHeaders(status) {
            statusCode = status;
            return true;
          },
          onData(chunk) {
            chunks.push(chunk);
            return true;
          },
          onComplete() {
            finish();
            resolve({ statusCode, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks) });
          },
          onError(error) {
            finish();
            reject(
              isAbortError(error) || signal?.aborted ? error : upstreamUnavailable(error, generateTimeoutMs),
            );
          },
        } as Dispatcher.DispatchHandler,
      );
    });
  }

  /** `GET {router}/workers`, leniently decoded; an empty list when the router has no such endpoint. */
  async workers(): Promise<EngineWorker[]> {
    const list = routerWorkersSchema.parse(await this.#getJson(`${this.routerUrl}/workers`));
    const workers: EngineWorker[] = [];
    for (const entry of list) {
      if (typeof entry === 'string') {
        workers.push({ url: entry.replace(/\/+$/, ''), healthy: true, connectionMode: 'http' });
        continue;
      }
      const parsed = routerWorkerSchema.safeParse(entry);
      if (!parsed.success) continue;
      const record = parsed.data;
      const url = record.url ?? record.worker_url;
      if (url === undefined) continue;
      const healthy = record.is_healthy ?? record.healthy ?? true;
      const mode = record.connection_mode ?? 'http';
      workers.push({
        url: url.replace(/\/+$/, ''),
        healthy: healthy === true,
        connectionMode: String(mode).toLowerCase(),
      });
    }
    return workers;
  }

  /** Healthy workers reachable over HTTP. */
  async healthyHttpWorkers(): Promise<EngineWorker[]> {
    try {
      return (await this.workers()).filter((worker) => worker.healthy && worker.connectionMode === 'http');
    } catch {
      return [];
    }
  }

  /**
   * Aborts one request id on every healthy HTTP worker (the one running it returns the partial
   * output from its `/generate`); falls back to the router's `/abort_request`.
   */
  async abort(rid: string): Promise<AbortOutcome> {
    const workers = await this.healthyHttpWorkers();
    const targets = workers.length > 0 ? workers.map((worker) => worker.url) : [this.routerUrl];
    const errors: string[] = [];
    let succeeded = false;
    for (const target of targets) {
      try {
        await this.#postJson(`${target}/abort_request`, { rid, abort_all: false });
        succeeded = true;
      } catch (error) {
        errors.push(String(error instanceof Error ? error.message : error));
      }
    }
    if (!succeeded && workers.length > 0) {
      try {
        await this.#postJson(`${this.routerUrl}/abort_request`, { rid, abort_all: false });
        succeeded = true;
      } catch (error) {
        errors.push(String(error instanceof Error ? error.message : error));
      }
    }
    return { rid, succeeded, error: succeeded ? null : errors.join('; ') || 'abort failed' };
  }

  /** `POST {worker}/parse_function_call` on the first healthy worker that answers. */
  async parseFunctionCall(body: ParseFunctionCallRequest): Promise<ParseFunctionCallAnswer | null> {
    return this.#firstWorkerAnswer('/parse_function_call', body, parseFunctionCallAnswerSchema);
  }

  /** `POST {worker}/separate_reasoning` on the first healthy worker whose answer has a `text` field. */
  async separateReasoning(body: SeparateReasoningRequest): Promise<SeparateReasoningAnswer | null> {
    return this.#firstWorkerAnswer('/separate_reasoning', body, separateReasoningAnswerSchema);
  }

  /** `GET {worker}/get_weight_version` of every healthy HTTP worker (null where it failed). */
  async workerWeightVersions(): Promise<Array<string | null>> {
    const workers = await this.healthyHttpWorkers();
    return Promise.all(
      workers.map(async (worker) => {
        try {
          const payload = workerWeightVersionSchema.safeParse(
            await this.#getJson(`${worker.url}/get_weight_version`),
          );
          return payload.success ? toVersion(payload.data.weight_version ?? payload.data.version) : null;
        } catch {
          return null;
        }
      }),
    );
  }

  /** `GET {router}/v1/models` as the router answers it. */
  async models(): Promise<unknown> {
    return this.#getJson(`${this.routerUrl}/v1/models`);
  }

  /** Closes every pooled connection. */
  async close(): Promise<void> {
    await this.#dispatcher.close();
  }

  // The first answer the schema accepts, from the healthy workers in turn.
  async #firstWorkerAnswer<Schema extends z.ZodType>(
    path: string,
    body: object,
    schema: Schema,
  ): Promise<z.output<Schema> | null> {
    const workers = await this.healthyHttpWorkers();
    for (const worker of workers) {
      try {
        const value = schema.safeParse(await this.#postJson(`${worker.url}${path}`, body));
        if (value.success) return value.data;
      } catch {
        // The next worker may answer.
      }
    }
    return null;
  }

  async #getJson(url: string): Promise<unknown> {
    const response = await request(url, {
      method: 'GET',
      dispatcher: this.#dispatcher,
      headersTimeout: controlTimeoutMs,
      bodyTimeout: controlTimeoutMs,
    });
    const text = await response.body.text();
    if (response.statusCode >= 400) {
      throw new DressageError({
        code: codeOfHttpStatus(response.statusCode),
        message: `GET ${url} returned HTTP ${response.statusCode}`,
        details: { url, status: response.statusCode },
      });
    }
    return text === '' ? null : JSON.parse(text);
  }

  async #postJson(url: string, body: unknown): Promise<unknown> {
    const response = await request(url, {
      method: 'POST',
      dispatcher: this.#dispatcher,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      headersTimeout: controlTimeoutMs,
      bodyTimeout: controlTimeoutMs,
    });
    const text = await response.body.text();
    if (response.statusCode >= 400) {
      throw new DressageError({
        code: codeOfHttpStatus(response.statusCode),
        message: `POST ${url} returned HTTP ${response.statusCode}`,
        details: { url, status: response.statusCode },
      });
    }
    if (text === '') return null;
    try {
      return JSON.parse(text);
    } catch {
      return null;
    }
  }
}

/**
 * A `/generate` answer as a {@link EngineGenerateResult}: checked against protocol's
 * `sglangGenerateResponseSchema`, then its token data copied into typed arrays.
 *
 * @throws ProxyHttpError 500 naming the field when the engine's answer does not have SGLang's shape.
 */
export function generateResultOf(payload: unknown): EngineGenerateResult {
  const checked = sglangGenerateResponseSchema.safeParse(payload);
  if (!checked.success) {
    const issue = checked.error.issues[0];
    throw new ProxyHttpError({
      status: 500,
      body: {
        detail: `SGLang /generate answered a body of the wrong shape: ${issue?.path.join('.') || '(root)'}: ${issue?.message}`,
      },
    });
  }
  const response = checked.data;
  const meta = response.meta_info ?? {};
  const output = decodeLogprobEntries(meta.output_token_logprobs);
  let outputIds: Int32Array | null = null;
  if (response.output_ids !== undefined) outputIds = Int32Array.from(response.output_ids);
  else if (output.ids.length > 0) outputIds = output.ids;
  const finish = meta.finish_reason ?? null;
  return {
    text: response.text ?? '',
    outputIds,
    outputLogprobs: output.logprobs,
    outputLogprobsInvalid: output.invalid,
    inputLogprobs:
      meta.input_token_logprobs === undefined
        ? null
        : decodeLogprobEntries(meta.input_token_logprobs).logprobs,
    weightVersion: toVersion(meta.weight_version ?? meta.version),
    finishReason: typeof finish === 'string' ? finish : (finish?.type ?? null),
    finishMessage: typeof finish === 'object' && finish !== null ? (finish.message ?? null) : null,
    routedExperts: meta.routed_experts ?? null,
    routedExpertsStart:
      typeof meta.routed_experts_start_len === 'number' && meta.routed_experts_start_len > 0
        ? Math.floor(meta.routed_experts_start_len)
        : 0,
  };
}
