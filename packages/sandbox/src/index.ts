// Public surface of @dressage/sandbox: the sandbox provider contract, the local bubblewrap provider
// and the pool of slots it leases from. The parts they are built from (bwrap command lines, the slot
// file system and process supervisor, process groups, socket pipes, the upstream gate, free ports)
// are in `@dressage/sandbox/internal`.

export {
  LocalBwrapPool,
  type LocalBwrapPoolOptions,
  type PoolLease,
} from './local-bwrap-pool.js';
export {
  LocalBwrapProvider,
  type LocalBwrapProviderOptions,
} from './local-bwrap-provider.js';
export {
  type PersistedPoolState,
  type PoolMode,
  type PoolStatus,
  readPoolState,
  type SlotState,
  type SlotStatus,
} from './pool-state.js';
export type { LimitSupport, ResourceLimits } from './resource-limits.js';
export type { SlotCommandOptions, SlotServer } from './slot-supervisor.js';
export type {
  CommandResult,
  RunCommandOptions,
  SandboxCapability,
  SandboxEndpoint,
  SandboxLease,
  SandboxProvider,
  SandboxServiceSpec,
  SandboxSpec,
} from './types.js';
