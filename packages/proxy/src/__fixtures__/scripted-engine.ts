import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type {
  SglangGenerateResponse,
  SglangLogprobEntry,
  SglangMetaInfo,
  SglangSamplingParams,
} from '@dressage/protocol';

/** What the scripted engine answers to one `/generate`. */
export interface ScriptedReply {
  /** Output text; ids come from `encode` unless given. */
  text?: string;
  ids?: number[];
  /** Per-token logprobs; default -0.1 each. Null is sent as null (what SGLang's orjson makes of NaN). */
  logprobs?: Array<number | null>;
  /** Weight version in meta_info; undefined uses the engine's current version, null omits it. */
  version?: string | null;
  /** `abort`: the engine ended the request early (a pause, its own or the proxy's). */
  finish?: 'stop' | 'length' | 'abort';
  finishMessage?: string;
  /** Emit tokens one by one with this delay, so a pause can abort mid-generation. */
  tokenDelayMs?: number;
  /** Answer with this HTTP status and body instead. */
  status?: number;
  body?: string;
  /**
   * Let an abort find nothing to stop: the request runs to its own end, as SGLang answers a
   * request that finished while the abort was on its way.
   */
  ignoreAbort?: boolean;
  /** Never answer (until aborted or the client goes away). */
  hang?: boolean;
  /** Leave out `output_ids` (the proxy falls back to logprob ids or text). */
  omitOutputIds?: boolean;
  /** Return this many more tokens than max_new_tokens allows (a backend ignoring the clamp). */
  ignoreMaxNewTokens?: boolean;
  /** R3: report routed experts from this position (`routed_experts_start_len`); default 0. */
  routedExpertsStart?: number;
}

/** The expert id the scripted engine reports for a token id at one (layer × top-k) slot. */
export function scriptedExpert(tokenId: number, slot: number): number {
  return (tokenId * 7 + slot * 3) % 251;
}

/** One `/generate` call as the engine saw it. */
export interface SeenRequest {
  body: {
    input_ids: number[];
    sampling_params: SglangSamplingParams;
    rid: string;
    logprob_start_len: number;
    return_logprob: boolean;
    [key: string]: unknown;
  };
  headers: IncomingMessage['headers'];
}

interface Running {
  abort: () => void;
  emitted: () => number;
}

/**
 * An SGLang-compatible engine on loopback whose answers a test scripts: slow token-by-token output,
 * aborts that return partial ids, version changes, HTTP errors and hangs. It is also its own router
 * (`/workers` lists itself).
 */
export class ScriptedEngine {
  readonly requests: SeenRequest[] = [];
  readonly aborts: string[] = [];
  version: string | null = 'v1';
  healthy = true;
  /** Ids per routed-experts row (layers × top-k) when a request asks for them. */
  routedExpertsWidth = 4;
  script: (request: SeenRequest, index: number) => ScriptedReply = () => ({ text: 'ok' });
  readonly #server: Server;
  readonly #running = new Map<string, Running>();
  readonly #encode: (text: string) => number[];
  readonly #decode: (ids: number[]) => string;
  #url = '';

  constructor(options: { encode: (text: string) => number[]; decode: (ids: number[]) => string }) {
    this.#encode = options.encode;
    this.#decode = options.decode;
    this.#server = createServer((request, response) => {
      this.#handle(request, response).catch((error: unknown) => {
        response.writeHead(500);
        response.end(String(error));
      });
    });
  }

  /** Base URL once started. */
  get url(): string {
    return this.#url;
  }

  /** Request ids running now. */
  get runningIds(): string[] {
    return [...this.#running.keys()];
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    for (const running of this.#running.values()) running.abort();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  /** Resolves when a `/generate` with at least `count` requests seen is running. */
  async waitForRunning(count = 1): Promise<void> {
    while (this.#running.size < count) await new Promise((resolve) => setTimeout(resolve, 5));
  }

  /** Resolves when a running request has emitted at least `count` tokens. */
  async waitForTokens(count: number): Promise<void> {
    while (![...this.#running.values()].some((running) => running.emitted() >= count)) {
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const json = (status: number, body: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    switch (request.url) {
      case '/workers':
        return json(200, {
          workers: [{ url: this.#url, is_healthy: this.healthy, connection_mode: 'http' }],
        });
      case '/get_weight_version':
        return json(200, { weight_version: this.version });
      case '/v1/models':
        return json(200, {
          object: 'list',
          data: [{ id: 'scripted-model', object: 'model', owned_by: 'test' }],
        });
      case '/abort_request': {
        const body = JSON.parse(text) as { rid: string };
        this.aborts.push(body.rid);
        this.#running.get(body.rid)?.abort();
        return json(200, {});
      }
      case '/generate':
        return this.#generate(JSON.parse(text) as SeenRequest['body'], request, response);
      default:
        return json(404, { detail: 'Not Found' });
    }
  }

  async #generate(
    body: SeenRequest['body'],
    request: IncomingMessage,
    response: ServerResponse,
  ): Promise<void> {
    const seen: SeenRequest = { body, headers: request.headers };
    this.requests.push(seen);
    const reply = this.script(seen, this.requests.length - 1);
    if (reply.status !== undefined) {
      response.writeHead(reply.status, { 'content-type': 'application/json' });
      response.end(reply.body ?? '{"error":"scripted failure"}');
      return;
    }
    let ids = reply.ids ?? this.#encode(reply.text ?? '');
    const limit = body.sampling_params.max_new_tokens as number | undefined;
    let finish: string = reply.finish ?? 'stop';
    if (limit !== undefined && ids.length > limit && !reply.ignoreMaxNewTokens) {
      ids = ids.slice(0, limit);
      finish = 'length';
    }
    const version = reply.version === undefined ? this.version : reply.version;
    const logprobs = reply.logprobs ?? ids.map(() => -0.1);
    let emitted = ids.length;
    if (reply.hang || reply.tokenDelayMs !== undefined) {
      emitted = 0;
      const aborted = await new Promise<boolean>((resolve) => {
        let timer: NodeJS.Timeout | undefined;
        const finishWith = (value: boolean) => {
          if (timer) clearInterval(timer);
          this.#running.delete(body.rid);
          resolve(value);
        };
        this.#running.set(body.rid, {
          abort: () => {
            if (!reply.ignoreAbort) finishWith(true);
          },
          emitted: () => emitted,
        });
        request.socket.once('close', () => finishWith(true));
        if (!reply.hang) {
          timer = setInterval(() => {
            emitted += 1;
            if (emitted >= ids.length) finishWith(false);
          }, reply.tokenDelayMs);
        }
      });
      if (aborted) finish = 'abort';
    }
    if (response.destroyed || request.socket.destroyed) return;
    const out = ids.slice(0, emitted);
    const meta: SglangMetaInfo = {
      id: body.rid,
      finish_reason:
        finish === 'abort'
          ? { type: 'abort', message: reply.finishMessage ?? 'Abort request' }
          : { type: finish },
      prompt_tokens: body.input_ids.length,
      completion_tokens: out.length,
      output_token_logprobs: out.map(
        (id, index): SglangLogprobEntry => [
          index < logprobs.length ? (logprobs[index] ?? null) : -0.1,
          id,
          null,
        ],
      ),
    };
    if (version !== null) meta.weight_version = version;
    if (body.return_routed_experts === true) {
      // One row per position of input + output except the last, from the position's token id.
      const sequence = [...body.input_ids, ...out];
      const start = reply.routedExpertsStart ?? 0;
      const width = this.routedExpertsWidth;
      const rows = Math.max(0, sequence.length - 1 - start);
      const experts = new Int32Array(rows * width);
      for (let row = 0; row < rows; row++)
        for (let slot = 0; slot < width; slot++)
          experts[row * width + slot] = scriptedExpert(sequence[start + row]!, slot);
      meta.routed_experts = Buffer.from(experts.buffer).toString('base64');
      if (start > 0) meta.routed_experts_start_len = start;
    }
    if (body.logprob_start_len === 0)
      meta.input_token_logprobs = body.input_ids.map(
        (id, index): SglangLogprobEntry => [index === 0 ? null : -1, id, null],
      );
    const payload: SglangGenerateResponse = { text: this.#decode(out), meta_info: meta };
    if (!reply.omitOutputIds) payload.output_ids = out;
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify(payload));
  }
}
