// Building blocks of @dressage/inspector for code that embeds or tests parts of it: the standalone
// HTML export of the page and the token classification the page colours by. Not covered by the
// package's compatibility promise.

export { standaloneHtml } from './server.js';
export { classifyTokens, tokenClassName, versionSpans, visibleText } from './views/token-kinds.js';
