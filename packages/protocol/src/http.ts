// The HTTP layer every Dressage server shares (`@dressage/protocol/http`): a route table with path
// parameters and `serve`, the request listener over it; size-limited body reading, JSON replies,
// server-sent event streams, and error statuses from DressageError codes.

export { codeOfHttpStatus, HttpError, type HttpErrorOptions, httpStatusOf } from './http/http-error.js';
export { sendJson, sendJsonText } from './http/json-reply.js';
export {
  bodyTooLarge,
  type ParseJsonBodyOptions,
  parseJsonBody,
  type ReadBodyOptions,
  readBody,
} from './http/request-body.js';
export {
  decodePathParameter,
  type RouteLookup,
  type RouteParameters,
  RouteTable,
  type RouteTableOptions,
  requestPath,
} from './http/route-table.js';
export {
  type RouteMiss,
  routeMissError,
  type ServeHandler,
  type ServeOptions,
  serve,
} from './http/serve.js';
export { SseWriter, sseComment, sseDoneFrame, sseFrame, sseHeaders } from './http/sse.js';
