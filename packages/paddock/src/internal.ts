// Building blocks of @dressage/paddock for code that embeds or tests parts of it: the BlackboxServer's
// in-process LLM proxy and its API bridges, agent output converters and the slot server's install
// lookup. Not covered by the package's compatibility promise.

export { agentCacheDir } from './adapters/agent-install.js';
export {
  opencodeMessagesToChat,
  streamJsonToChat,
} from './adapters/index.js';
export { knownBackends } from './blackbox/adapter.js';
export {
  type AnthropicMessage,
  type AnthropicMessagesRequest,
  anthropicMessagesRequestSchema,
  anthropicRequestToChat,
  chatToAnthropicResponse,
} from './blackbox/anthropic-messages.js';
export { normalizeRouter } from './blackbox/binding.js';
export { fingerprintOf } from './blackbox/fingerprint.js';
export {
  invalidatingErrors,
  type ProxyIncident,
  RolloutLlmProxy,
  type RolloutLlmProxyOptions,
  syntheticEmptyCompletion,
} from './blackbox/llm-proxy.js';
export {
  chatToResponsesResponse,
  type ResponsesRequest,
  type ResponsesResponse,
  responsesRequestSchema,
  responsesRequestToChat,
} from './blackbox/openai-responses.js';
export { idPattern } from './blackbox/schemas.js';
export { defaultServerScript, findInstallRoot } from './blackbox/slot-server.js';
