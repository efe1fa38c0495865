/** A network service a sandbox exposes (the BlackboxServer, a web app under test, ...). */
export interface SandboxServiceSpec {
  name: string;
  port: number;
  /** Path probed for liveness. Default `/health`. */
  healthPath?: string;
}

/** What a rollout asks of a sandbox. */
export interface SandboxSpec {
  /** The trajectory the sandbox serves; acquire and release are idempotent per id. */
  trajectoryId: string;
  /**
   * The recording-proxy session the sandbox's model calls are recorded under; a blackbox pool lets
   * the sandbox use no other. Default: the trajectory id.
   */
  sessionId?: string;
  envType?: string | null;
  envArgs?: Record<string, unknown>;
  services?: readonly SandboxServiceSpec[];
  timeoutSeconds?: number | null;
  metadata?: Record<string, unknown>;
  /** Extra environment for every command run in the sandbox. */
  env?: Record<string, string>;
}

/** An address of a sandbox service, with the headers a caller must send. */
export interface SandboxEndpoint {
  /** Without a trailing slash. */
  url: string;
  headers: Record<string, string>;
}

/** What a sandbox provider can do for a lease. */
export type SandboxCapability = 'command' | 'file' | 'public_url';

/** A sandbox held for one trajectory. */
export interface SandboxLease {
  trajectoryId: string;
  provider: string;
  sandboxId: string | null;
  endpoints: Record<string, SandboxEndpoint>;
  capabilities: readonly SandboxCapability[];
  metadata: Record<string, unknown>;
}

/** The outcome of one command run in a sandbox. A timeout is an outcome, not an error. */
export interface CommandResult {
  cmd: string;
  stdout: string;
  stderr: string;
  /** Exit status; `-1` when the process was killed by a signal (including the timeout). */
  returncode: number;
  timedOut: boolean;
  metadata: Record<string, unknown>;
}

/** Options of {@link SandboxProvider.runCommand}. */
export interface RunCommandOptions {
  /** Working directory inside the sandbox, relative to the work dir or absolute under it. */
  cwd?: string;
  env?: Record<string, string>;
  /** Seconds; the whole process group is killed when it expires. */
  timeoutSeconds?: number;
  stdin?: string;
}

/**
 * Where agents run. Every operation is keyed by a lease; `terminate` accepts the lease or its
 * trajectory id and is idempotent.
 */
export interface SandboxProvider {
  readonly name: string;
  create(spec: SandboxSpec): Promise<SandboxLease>;
  terminate(leaseOrTrajectoryId: SandboxLease | string): Promise<void>;
  getPublicUrl(lease: SandboxLease, port: number, serviceName?: string): Promise<string>;
  runCommand(
    lease: SandboxLease,
    cmd: string | readonly string[],
    options?: RunCommandOptions,
  ): Promise<CommandResult>;
  readFile(lease: SandboxLease, path: string): Promise<Buffer>;
  writeFile(
    lease: SandboxLease,
    path: string,
    content: string | Uint8Array,
    options?: { append?: boolean },
  ): Promise<void>;
}
