// Public surface of @dressage/paddock: the BlackboxServer with its agent adapters, and the paddock
// clients and generate functions that turn agent runs into samples. The sandboxes they run in are
// @dressage/sandbox; the parts they are built from (the LLM proxy and its API bridges, agent output
// converters) are in `@dressage/paddock/internal`.

export type {
  BlackboxServerStatus as ServerStatus,
  BlackboxSessionState as SessionState,
  BlackboxTurnStatus as TurnStatus,
} from '@dressage/protocol/blackbox';
export {
  type AgentInstallOptions,
  type AgentPackage,
  agentBinDirectories,
  agentInstallDir,
  agentPackages,
  ensureAgentInstalled,
} from './adapters/agent-install.js';
export {
  builtinAdapterExecutableVariables,
  builtinAdapterOptionsSchemas,
  builtinAdapters,
  ClaudeCodeAdapter,
  CodexAdapter,
  OpenclawAdapter,
  OpencodeAdapter,
  QwenCodeAdapter,
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
} from './blackbox/adapter.js';
export {
  type BlackboxServerConfig,
  blackboxConfigFromEnv,
  defaultBlackboxConfig,
} from './blackbox/config.js';
export { BlackboxHttpError, type BlackboxHttpErrorOptions } from './blackbox/http-error.js';
export { blackboxServerVersion } from './blackbox/routes.js';
export {
  type BlackboxMessage,
  type ProxyOptions,
  proxyOptionsSchema,
  type TurnUsage,
} from './blackbox/schemas.js';
export { BlackboxServer, type BlackboxServerOptions } from './blackbox/server.js';
export { blackboxSlotServer } from './blackbox/slot-server.js';
export { BlackboxCallError, BlackboxClient, type RetryOptions } from './paddock/blackbox-client.js';
export { type BlackboxGenerateOptions, createBlackboxGenerate } from './paddock/blackbox-generate.js';
export {
  type AnyToolDefinition,
  assistantText,
  defineTool,
  type ExecutedToolCall,
  type ParsedToolCall,
  parseToolCalls,
  type SandboxToolContext,
  sandboxTools,
  Toolbox,
  type ToolCallingCompletion,
  type ToolDefinition,
  type ToolOutput,
  type ToolTurn,
} from './paddock/tools.js';
export { httpTrajectoryProxy, type TrajectoryProxy } from './paddock/trajectory-proxy.js';
export {
  makeGenerate,
  PaddockWhiteboxAgent,
  WhiteboxAgent,
  type WhiteboxAgentClass,
  type WhiteboxChatRequest,
  type WhiteboxGenerateOptions,
  type WhiteboxRunContext,
} from './paddock/whitebox.js';
export { WhiteboxToolPaddock } from './paddock/whitebox-tools.js';
