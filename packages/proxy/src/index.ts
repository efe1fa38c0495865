// Public surface of @dressage/proxy: the server and its configuration, the rollout-side client and
// tool-call hooks. The parts the server is built from (engine client, generation controller,
// parsers, the service, the trajectory store) are in `@dressage/proxy/internal`.

export {
  createProxyConfig,
  type ParseBackend,
  type ProxyConfig,
  type ProxyConfigInput,
  proxyConfigSchema,
  type RoutedExpertsDtype,
  type TokenBuildMode,
  type TokenBuildModel,
} from './config.js';
export {
  defaultHeapRoomBytes,
  type HeapGrowthPolicy,
  heapGrowingPercent,
  installHeapGrowthPolicy,
} from './heap-growth.js';
export { ProxyHttpError, type ProxyHttpErrorOptions } from './http-error.js';
export { proxyNodeFlags } from './node-flags.js';
export {
  createPromptTokenizer,
  loadPromptRendering,
  loadPromptTokenizer,
  type PromptRendering,
  type PromptTokenizer,
} from './prompt-tokenizer.js';
export {
  type ChatCompletionRequestBody,
  type CompletionIds,
  ProxyClient,
  ProxyClientError,
  type ProxyClientOptions,
  type ReadTrajectoryOptions,
  type TrajectoryRead,
} from './proxy-client.js';
export { type ProxyServer, type StartProxyOptions, startProxyServer } from './server.js';
export {
  loadToolCallHooks,
  TOOL_CALL_HOOK_FAILURES_KEY,
  type ToolCallHook,
  type ToolCallHookContext,
  type ToolCallHookFailure,
  type ToolCallHookStage,
  toolCallIdempotencyKey,
  validateToolCallHook,
} from './tool-call-hooks.js';
