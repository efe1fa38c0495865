import { randomUUID } from 'node:crypto';
import { expandSegmentsToSamples, markAbortedNoGrad } from '@dressage/multi-segment';
import { blackboxExecuteCommandsSchema, type Sample } from '@dressage/protocol';
import type { SandboxLease, SandboxProvider } from '@dressage/sandbox';
import { sandboxPaths } from '@dressage/sandbox/internal';
import type { BlackboxMessage, BlackboxRegisterRequest } from '../blackbox/schemas.js';

import { BlackboxCallError, BlackboxClient, type RetryOptions } from './blackbox-client.js';
import type { TrajectoryProxy } from './trajectory-proxy.js';

/** Options of {@link createBlackboxGenerate}. */
export interface BlackboxGenerateOptions {
  provider: SandboxProvider;
  proxy: TrajectoryProxy;
  /** The Dressage proxy URL the sandboxed agent reaches. Default `DRESSAGE_PROXY_URL`. */
  proxyUrl?: string;
  /** Default `DRESSAGE_BLACKBOX_TYPE`, else `opencode`. */
  blackboxType?: string;
  backendOptions?: BlackboxRegisterRequest['backend_options'];
  /**
   * The agent's system prompt: written into the sandbox's server runtime directory and registered
   * as `system_prompt_file` (the adapter gives it to the agent in place of its own).
   */
  systemPrompt?: string | null;
  serverConfig?: NonNullable<BlackboxRegisterRequest['server_config']>;
  retry?: RetryOptions;
  /** slime's `--max-tokens-per-gpu`: segments longer than `maxTokensPerGpu × contextParallelSize` are truncated. */
  maxTokensPerGpu?: number | null;
  /** slime's `--context-parallel-size` (the token cap's factor). Default 1. */
  contextParallelSize?: number | null;
  /** Mask trainable tokens of older weight versions (`expandSegmentsToSamples`). */
  maskNonlastVersionTokens?: boolean;
  /** Routing replay (R3): decode each segment's routed experts to this model shape. */
  routingReplay?: { numLayers: number; moeRouterTopk: number } | null;
}

const semanticErrors = new Set(['backend_timeout', 'context_overflow', 'max_steps_exceeded']);
const harvested = new Set(['context_overflow', 'max_steps_exceeded']);

/**
 * The blackbox generate function: per sample, lease a sandbox running a BlackboxServer, register the
 * agent against the Dressage proxy, run the before-agent commands, call the agent (async, polled),
 * run the after-agent commands, release the sandbox, finalize and read the trajectory, and expand it
 * into samples. The sandbox is always released. Context overflow and max steps are harvested (the
 * partial trajectory trains); any other failure yields a no-gradient placeholder.
 */
export function createBlackboxGenerate(options: BlackboxGenerateOptions) {
  return async (sample: Sample): Promise<Sample[]> => {
    const sessionId = `bbs-${randomUUID()}`;
    const instanceId = String(sample.metadata.instance_id ?? sample.group_index ?? randomUUID());
    const metadata: Sample['metadata'] = { ...sample.metadata, instance_id: instanceId };
    let lease: SandboxLease | null = null;
    const release = async () => {
      const leased = lease;
      lease = null;
      if (leased) await options.provider.terminate(leased).catch(() => undefined);
    };
    const abort = async (reason: string, extra: Sample['metadata'] = {}): Promise<Sample[]> => {
      const history = Array.isArray(metadata.blackbox_failure_history)
        ? [...(metadata.blackbox_failure_history as unknown[])]
        : [];
      history.push({ session_id: sessionId, reason, ...extra });
      await options.proxy.discardSession(sessionId).catch(() => undefined);
      return [
        markAbortedNoGrad(
          { ...sample, metadata: { ...metadata, ...extra, blackbox_failure_history: history } },
          { sessionId, instanceId },
        ),
      ];
    };
    try {
      lease = await options.provider.create({
        trajectoryId: sessionId,
        sessionId,
        services: [{ name: 'blackbox', port: 31000, healthPath: '/health' }],
        metadata: { paddock_mode: 'blackbox' },
      });
      const endpoint =
        lease.endpoints.blackbox?.url ?? (await options.provider.getPublicUrl(lease, 31000, 'blackbox'));
      const client = new BlackboxClient(endpoint, options.retry, lease.endpoints.blackbox?.headers ?? {});
      let systemPromptFile: string | null = null;
      if (options.systemPrompt) {
        systemPromptFile = `${sandboxPaths.runtime}/system-prompt.txt`;
        await options.provider.writeFile(lease, systemPromptFile, options.systemPrompt);
      }
      await client.register({
        blackbox_type: options.blackboxType ?? process.env.DRESSAGE_BLACKBOX_TYPE ?? 'opencode',
        router: options.proxyUrl ?? process.env.DRESSAGE_PROXY_URL ?? 'http://127.0.0.1:8800',
        bound_session_id: sessionId,
        bound_instance_id: instanceId,
        bound_sandbox_id: lease.sandboxId,
        backend_options: options.backendOptions ?? {},
        ...(systemPromptFile === null ? {} : { system_prompt_file: systemPromptFile }),
        server_config: { backend_timeout: 1800, ...options.serverConfig },
      });
      const commands = blackboxExecuteCommandsSchema.parse(metadata.blackbox_execute_cmds ?? {});
      const results: (Awaited<ReturnType<BlackboxClient['executeCommand']>> & {
        stage: string;
        name: string;
      })[] = [];
      const runStage = async (stage: 'before_agent' | 'after_agent') => {
        for (const command of commands[stage] ?? []) {
          const result = await client.executeCommand(sessionId, command.cmd, command.timeout);
          const stdout = String(result.stdout ?? '');
          results.push({
            stage,
            name: command.name,
            ...result,
            stdout: command.stdout_limit ? stdout.slice(0, command.stdout_limit) : stdout,
          });
          if (command.required && (result.returncode !== 0 || result.timed_out === true)) {
            throw new BlackboxCallError(500, {
              error: 'execute_cmd_failed',
              message: `required command ${command.name} failed`,
            });
          }
        }
      };
      await runStage('before_agent');
      const prompt = sample.prompt;
      const messages: readonly BlackboxMessage[] =
        typeof prompt === 'string' ? [{ role: 'user', content: prompt }] : prompt;
      let agentResponse: string | null = null;
      try {
        const turn = await client.callAgent(sessionId, messages);
        const last = (turn.outputs ?? []).findLast((message) => message.role === 'assistant');
        agentResponse = typeof last?.content === 'string' ? last.content : null;
      } catch (error) {
        if (!(error instanceof BlackboxCallError) || !harvested.has(error.error)) {
          const kind = error instanceof BlackboxCallError ? error.error : 'transport_error';
          const expected =
            error instanceof Error && error.message.includes('Dressage proxy generation_preempted');
          return await abort(error instanceof Error ? error.message : String(error), {
            blackbox_agent_error_kind: kind,
            ...(error instanceof BlackboxCallError ? { blackbox_agent_http_status_code: error.status } : {}),
            ...(semanticErrors.has(kind) ? { blackbox_agent_semantic_error: true } : {}),
            ...(expected ? { blackbox_expected_abort: true } : {}),
          });
        }
        Object.assign(metadata, {
          blackbox_agent_early_stop: true,
          blackbox_agent_early_stop_kind: error.error,
          blackbox_agent_error_kind: error.error,
          blackbox_agent_http_status_code: error.status,
          blackbox_agent_error_details: error.body.details ?? {},
        });
      }
      await runStage('after_agent');
      metadata.execute_cmds = results;
      // The sandbox has done its part: its slot recycles for the next sample while the trajectory
      // is finalized and read, rather than after.
      await release();
      await options.proxy.finalizeSession(sessionId, { instanceId, label: sample.label ?? undefined });
      const read = await options.proxy.readTrajectory({ trajectoryId: sessionId, drain: true });
      if (read.data.length === 0) return await abort('the proxy recorded no segments');
      return expandSegmentsToSamples({ ...sample, session_id: sessionId, metadata }, read.data, {
        sessionId,
        instanceId,
        agentResponse,
        maxTokensPerGpu: options.maxTokensPerGpu ?? null,
        contextParallelSize: options.contextParallelSize ?? null,
        maskNonlastVersionTokens: options.maskNonlastVersionTokens ?? false,
        ...(options.routingReplay ? { useRolloutRoutingReplay: true, ...options.routingReplay } : {}),
      });
    } catch (error) {
      return await abort(error instanceof Error ? error.message : String(error), {
        blackbox_agent_error_kind: error instanceof BlackboxCallError ? error.error : 'paddock_error',
      });
    } finally {
      await release();
    }
  };
}
