import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';

/**
 * Answers with JSON text already written (typed arrays serialised straight into it, say), with its
 * `content-length`. `headers` are added, and may replace `content-type` (default
 * `application/json`). When the headers are already out (a stream that failed midway) the response
 * is only ended, and a destroyed one is left alone.
 */
export function sendJsonText(
  response: ServerResponse,
  status: number,
  text: string,
  headers?: OutgoingHttpHeaders,
): void {
  if (response.destroyed) return;
  if (response.headersSent) {
    if (!response.writableEnded) response.end();
    return;
  }
  response.writeHead(status, {
    'content-type': 'application/json',
    ...headers,
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

/**
 * Answers with `body` as JSON ({@link sendJsonText}); `undefined` is an empty body, as a FastAPI
 * route returning nothing answers.
 */
export function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers?: OutgoingHttpHeaders,
): void {
  sendJsonText(response, status, body === undefined ? '' : JSON.stringify(body), headers);
}
