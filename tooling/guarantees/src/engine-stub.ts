import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the stub answers to one `/generate`. */
export interface StubReply {
  /** Output token ids. */
  ids: number[];
  /** Their decoded text, as SGLang sends it beside the ids; default empty. */
  text?: string;
  /** Per-token logprobs; null (or NaN, sent as null) is what an engine serving NaN weights sends. Default -0.1. */
  logprobs?: Array<number | null>;
  /** Never answer (the engine hangs). */
  hang?: boolean;
}

/**
 * An SGLang-compatible engine on loopback that answers known token ids. It stands in for the engine
 * only where the real one cannot be made to misbehave on demand: null logprobs, a hang.
 */
export class EngineStub {
  /** Decides each `/generate` answer; by default the ids of `defaultIds`. */
  reply: (body: { input_ids: number[]; rid: string }) => StubReply;
  readonly #server: Server;
  readonly #hanging = new Set<ServerResponse>();
  #url = '';

  constructor(defaultIds: number[]) {
    this.reply = () => ({ ids: defaultIds });
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

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.#server.listen(0, '127.0.0.1', resolve));
    this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    for (const response of this.#hanging) response.destroy();
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const json = (status: number, body: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    switch (request.url) {
      case '/workers':
        return json(200, { workers: [{ url: this.#url, is_healthy: true, connection_mode: 'http' }] });
      case '/get_weight_version':
        return json(200, { weight_version: 'v1' });
      case '/abort_request':
        return json(200, {});
      case '/generate': {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          input_ids: number[];
          rid: string;
        };
        const reply = this.reply(body);
        if (reply.hang) {
          this.#hanging.add(response);
          response.once('close', () => this.#hanging.delete(response));
          return;
        }
        // JSON has no NaN: SGLang (orjson) sends a NaN logprob as null, and so does the stub.
        const logprobs = reply.logprobs ?? reply.ids.map(() => -0.1);
        const pairs = reply.ids.map((id, index) => {
          const value = logprobs[index];
          return `[${value === null || value === undefined || !Number.isFinite(value) ? 'null' : String(value)},${id},null]`;
        });
        const meta = `{"id":${JSON.stringify(body.rid)},"finish_reason":{"type":"stop"},"prompt_tokens":${body.input_ids.length},"completion_tokens":${reply.ids.length},"weight_version":"v1","output_token_logprobs":[${pairs.join(',')}]}`;
        response.writeHead(200, { 'content-type': 'application/json' });
        response.end(
          `{"text":${JSON.stringify(reply.text ?? '')},"output_ids":${JSON.stringify(reply.ids)},"meta_info":${meta}}`,
        );
        return;
      }
      default:
        return json(404, { detail: 'Not Found' });
    }
  }
}
