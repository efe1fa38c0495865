// Building blocks of @dressage/sandbox for code that embeds or tests parts of it: bwrap command lines,
// the slot file system and process supervisor, the pool's state file, process groups, socket pipes,
// the upstream gate and free ports. Not covered by the package's compatibility promise.

export {
  type BwrapOptions,
  buildBwrapArgs,
  defaultSystemMounts,
  type HostIdentity,
  type SlotDirectories,
  sandboxBaseEnv,
  sandboxPaths,
  userNamespaceSeccompProgram,
} from './bwrap-command.js';
export { findFreePortRange } from './free-ports.js';
export {
  hostPathOf,
  shellJoin,
  shellQuote,
} from './local-bwrap-provider.js';
export { PoolStateFile } from './pool-state.js';
export {
  killProcessGroup,
  type ProcessGroupOptions,
  type ProcessGroupResult,
  runProcessGroup,
} from './process-group.js';
export { bwrapInfoFd, SandboxProcess } from './sandbox-process.js';
export { SlotFiles, type SlotFilesOptions, type SlotHandle } from './slot-files.js';
export {
  probeHealth,
  resolveSandboxCwd,
  SlotSupervisor,
  type SlotSupervisorOptions,
} from './slot-supervisor.js';
export {
  type SocketAddress,
  type SocketPipe,
  type SocketPipeOptions,
  startSocketPipe,
} from './socket-pipe.js';
export {
  allowedUpstreamRoutes,
  startUpstreamGate,
  type UpstreamGate,
  type UpstreamGateOptions,
} from './upstream-gate.js';
