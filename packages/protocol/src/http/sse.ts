import type { ServerResponse } from 'node:http';

/**
 * Response headers of every Dressage event stream: `text/event-stream` in UTF-8, and nothing between
 * server and client (a cache, a transforming or buffering reverse proxy) may hold frames back.
 */
export const sseHeaders = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache, no-transform',
  'x-accel-buffering': 'no',
} as const;

/** The frame that ends an OpenAI-style stream. */
export const sseDoneFrame = 'data: [DONE]\n\n';

/** One event frame: `data: <json>`, after `event: <name>` when the event is named. */
export function sseFrame(data: unknown, event?: string): string {
  const frame = `data: ${JSON.stringify(data)}\n\n`;
  return event === undefined ? frame : `event: ${event}\n${frame}`;
}

/** A comment frame (a heartbeat: clients skip it). */
export function sseComment(text: string): string {
  return `: ${text}\n\n`;
}

/**
 * Writes one server-sent event stream: the status and {@link sseHeaders} before the first frame
 * (or at {@link SseWriter.start}), then frames, then the end. Frames written after the client hung
 * up are dropped, so a producer that runs on after a disconnect needs no checks of its own.
 *
 * @example
 * ```ts
 * const stream = new SseWriter(response);
 * stream.send({ choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: null }] });
 * stream.end(sseDoneFrame);
 * ```
 */
export class SseWriter {
  readonly #response: ServerResponse;

  constructor(response: ServerResponse) {
    this.#response = response;
  }

  /** True once the headers are out: the status can no longer change. */
  get started(): boolean {
    return this.#response.headersSent;
  }

  /** Sends the 200 and the headers now, before any frame (a stream that will be slow to start). */
  start(): this {
    if (!this.#response.headersSent && !this.#response.destroyed) this.#response.writeHead(200, sseHeaders);
    return this;
  }

  /** Sends one event ({@link sseFrame}). */
  send(data: unknown, event?: string): void {
    this.write(sseFrame(data, event));
  }

  /** Sends frames already rendered (`data: ...\n\n`, comments). */
  write(frames: string): void {
    const response = this.#response;
    if (response.destroyed || response.writableEnded) return;
    this.start();
    response.write(frames);
  }

  /** Ends the stream after `frames` (the last events, `[DONE]`), in one write. */
  end(frames = ''): void {
    const response = this.#response;
    if (response.destroyed || response.writableEnded) return;
    this.start();
    response.end(frames);
  }
}
