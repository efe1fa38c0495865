// The HTTP layer every Dressage server shares (`@dressage/protocol/http`): a route table with path
// parameters, size-limited body reading, JSON replies and error statuses from DressageError codes.

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
