// Public surface of @dressage/paddock: sandboxes, the BlackboxServer with its agent adapters and LLM
// proxy, and the paddock clients and generate functions that turn agent runs into samples.

export type {
  BlackboxServerStatus as ServerStatus,
  BlackboxSessionState as SessionState,
  BlackboxTurnStatus as TurnStatus,
} from '@dressage/protocol';
export {
  type AgentPackage,
  agentBinDirectories,
  agentCacheDir,
  agentInstallDir,
  agentPackages,
  ensureAgentInstalled,
} from './adapters/agent-install.js';
export {
  builtinAdapters,
  ClaudeCodeAdapter,
  CodexAdapter,
  OpenclawAdapter,
  OpencodeAdapter,
  opencodeMessagesToChat,
  QwenCodeAdapter,
  qwenStreamToChat,
} from './adapters/index.js';
export {
  type AdapterCapabilities,
  type AdapterContext,
  type AdapterFactory,
  AdapterOptionsError,
  type AdapterTurn,
  type AdapterTurnResult,
  AgentTurnError,
  agentTurnErrorStatus,
  type BlackboxAdapter,
  defaultCapabilities,
  knownBackends,
} from './blackbox/adapter.js';
export { normalizeRouter } from './blackbox/binding.js';
export {
  anthropicRequestToChat,
  chatToAnthropicResponse,
  chatToResponsesResponse,
  responsesRequestToChat,
} from './blackbox/bridges.js';
export {
  type BlackboxServerConfig,
  blackboxConfigFromEnv,
  defaultBlackboxConfig,
} from './blackbox/config.js';
export { fingerprintOf } from './blackbox/fingerprint.js';
export { BlackboxHttpError } from './blackbox/http-error.js';
export {
  invalidatingErrors,
  type ProxyIncident,
  RolloutLlmProxy,
  type RolloutLlmProxyOptions,
  syntheticEmptyCompletion,
} from './blackbox/llm-proxy.js';
export { blackboxServerVersion } from './blackbox/routes.js';
export { type BlackboxMessage, idPattern, type ProxyOptions, type TurnUsage } from './blackbox/schemas.js';
export { BlackboxServer, type BlackboxServerOptions } from './blackbox/server.js';
export {
  BlackboxCallError,
  BlackboxClient,
  type BlackboxGenerateOptions,
  createBlackboxGenerate,
  type RetryOptions,
  type TrajectoryProxy,
} from './paddock/blackbox-generate.js';
export {
  httpTrajectoryProxy,
  makeGenerate,
  PaddockWhiteboxAgent,
  WhiteboxAgent,
  type WhiteboxAgentClass,
  type WhiteboxGenerateOptions,
  type WhiteboxRunContext,
  WhiteboxToolPaddock,
} from './paddock/whitebox.js';
export {
  type BwrapOptions,
  buildBwrapArgs,
  defaultSystemMounts,
  sandboxBaseEnv,
  sandboxPaths,
} from './sandbox/bwrap-command.js';
export { findFreePortRange } from './sandbox/free-ports.js';
export {
  LocalBwrapPool,
  type LocalBwrapPoolOptions,
  type PoolLease,
  type PoolMode,
  type PoolStatus,
  type SlotState,
  type SlotStatus,
} from './sandbox/local-bwrap-pool.js';
export {
  LocalBwrapProvider,
  type LocalBwrapProviderOptions,
  shellJoin,
  shellQuote,
} from './sandbox/local-bwrap-provider.js';
export { killProcessGroup, type ProcessGroupResult, runProcessGroup } from './sandbox/process-group.js';
export type { LimitSupport, ResourceLimits } from './sandbox/resource-limits.js';
export type {
  CommandResult,
  RunCommandOptions,
  SandboxCapability,
  SandboxEndpoint,
  SandboxLease,
  SandboxProvider,
  SandboxServiceSpec,
  SandboxSpec,
} from './sandbox/types.js';
