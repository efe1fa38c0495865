// Building blocks of @dressage/tito for packages that compare conversations or probe templates
// themselves (the proxy's session routing): message normalisation and comparison, canonical and
// template JSON, template probes and the first difference between two renders. Not covered by
// the package's compatibility promise.

export { toCanonicalJson, toTemplateJson } from './json-format.js';
export {
  canonicalToolsJson,
  firstMismatch,
  isMessagePrefix,
  type MessageComparison,
  messageText,
  type NormalizedMessage,
  type NormalizedToolCall,
  normalizedMessagesEqual,
  normalizeMessage,
  normalizeMessages,
  rendersAlike,
  toolCallArguments,
  toolsHash,
} from './messages.js';
export { firstRenderDifference, type RenderDifference } from './renderers/template-check.js';
export { startsWithText } from './text-prefix.js';
export { rendersNoToolsLikeEmptyTools } from './tools-probe.js';
