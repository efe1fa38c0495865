// The agents of a run's RL phase: its generate function and what must be closed after it.
import { makeGenerate, type WhiteboxAgentClass } from '@dressage/paddock';
import type { Sample } from '@dressage/protocol';
import type { GenerateContext, GenerateFunction, SamplingParams } from '@dressage/schedulers';
import { type BlackboxAgents, startBlackboxAgents } from './blackbox-agents.js';
import { whiteboxSettingsOf } from './expansion-options.js';
import type { RunContext } from './run-context.js';
import { needsSandbox, startWhiteboxSandboxes, type WhiteboxSandboxes } from './whitebox-sandboxes.js';

/** The agents of the RL phase: its generate function and what must be closed after it. */
export interface RunAgents {
  generate: GenerateFunction;
  blackbox: BlackboxAgents | null;
  sandboxes: WhiteboxSandboxes | null;
}

/**
 * The generate function the scheduler calls: the recipe's generate hook, its blackbox agent CLI, or
 * its whitebox agent class (with sandboxes when it has tools in one). Each failed attempt is logged.
 */
export async function startAgents(run: RunContext, currentStep: () => number): Promise<RunAgents> {
  const { loaded, recipe, stack, proxyClient, log } = run;
  const { hooks } = run.setup;
  const AgentClass = run.setup.modules.agent;
  let sandboxes: WhiteboxSandboxes | null = null;
  let blackbox: BlackboxAgents | null = null;
  if (hooks.generate === null && recipe.blackbox === undefined && needsSandbox(AgentClass)) {
    sandboxes = await startWhiteboxSandboxes({
      slots: run.plan.sandboxSlots,
      outputDirectory: run.plan.outputDirectory,
    });
    log(`whitebox sandboxes: ${sandboxes.description}`);
  }
  if (hooks.generate === null && recipe.blackbox !== undefined) {
    blackbox = await startBlackboxAgents({
      loaded,
      proxyUrl: stack.proxyUrl,
      proxy: proxyClient,
      outputDirectory: run.plan.outputDirectory,
    });
    log(`blackbox agents: ${blackbox.description}`);
  }
  // A generate hook gets the run's proxy with the scheduler's context.
  const hookGenerate = hooks.generate;
  const generate = run.errorLog.wrapGenerate(
    (hookGenerate === null
      ? null
      : (sample: Sample, samplingParams: SamplingParams, context: GenerateContext) =>
          hookGenerate(sample, samplingParams, {
            ...context,
            proxyUrl: stack.proxyUrl,
            proxy: proxyClient,
          })) ??
      blackbox?.generate ??
      makeGenerate(AgentClass as WhiteboxAgentClass, {
        proxy: proxyClient,
        proxyUrl: stack.proxyUrl,
        ...(sandboxes === null ? {} : { provider: sandboxes.provider }),
        ...whiteboxSettingsOf(recipe),
      }),
    hooks.generate !== null
      ? `generate hook ${recipe.hooks.generate}`
      : blackbox !== null
        ? `blackbox agent ${recipe.blackbox?.agent}`
        : `whitebox agent ${(AgentClass as WhiteboxAgentClass).name}`,
    currentStep,
  );
  return { generate, blackbox, sandboxes };
}
