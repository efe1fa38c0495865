// For users: start the inspector, or load and query a source programmatically. The page's own
// helpers (the standalone HTML export, token classification) are in `@dressage/inspector/internal`.

export type {
  InspectedSegment,
  InspectedSession,
  SegmentView,
  SessionSummary,
} from './model.js';
export { type InspectorServer, listenInspector } from './server.js';
export {
  sessionDetail,
  sessionExport,
  TokenDecoder,
  type TokenTextDecoder,
  tokenPage,
} from './session-detail.js';
export { maxPageSize, parseSessionQuery, SessionIndex, type SessionQuery } from './session-index.js';
export { loadRunDirectory } from './sources/run-directory.js';
export { loadSegmentFiles } from './sources/segment-file.js';
export type { InspectorSource, RunErrorLine, SourceKind } from './sources/source.js';
export { loadStoreDirectory } from './sources/store-directory.js';
export {
  defaultInspectorPort,
  defaultTokenizerDirectory,
  loadSource,
  type SourceOptions,
  type StartInspectorOptions,
  startInspector,
} from './start.js';
export type {
  ErrorPage,
  InspectorInfo,
  SegmentDetail,
  SessionDetail,
  SessionExport,
  SessionPage,
  TokenPage,
  TokenRow,
} from './views/api-types.js';
export type { TokenKind, TokenVersionSpan } from './views/token-kinds.js';
