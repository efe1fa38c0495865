// A run's checkpoint: the trainer's state, the data source's position and `run-state.json`, which
// names them and is written last.
import { existsSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { TrainerClient } from '@dressage/trainer-bridge';
import type { EmbeddedStack } from './embedded-stack.js';
import type { RunDataSource } from './hooks.js';

/** `run-state.json`: the steps a run completed and the checkpoint that holds them. */
export interface RunState {
  /** RL steps completed. */
  step: number;
  weight_version: string;
  checkpoint: string;
}

const stateFile = 'run-state.json';

/** The run state of `directory`, or null when it has none (a new run). */
export async function readRunState(directory: string): Promise<RunState | null> {
  const path = join(directory, stateFile);
  if (!existsSync(path)) return null;
  return JSON.parse(await readFile(path, 'utf8')) as RunState;
}

async function writeRunState(directory: string, state: RunState): Promise<void> {
  // Atomic replace: a run killed mid-write keeps the previous state.
  const path = join(directory, stateFile);
  await writeFile(`${path}.tmp`, JSON.stringify(state, null, 2));
  await rename(`${path}.tmp`, path);
}

/**
 * Saves the trainer's state after `step` RL steps (`rollout_id` = the steps trained), then the
 * data-source position, then `run-state.json` naming the checkpoint the trainer answered: the
 * state file is written last, so a run killed in between resumes from the previous checkpoint.
 */
export async function checkpoint(
  trainer: TrainerClient,
  stack: Pick<EmbeddedStack, 'checkpointsAt'>,
  dataSource: RunDataSource,
  outputDirectory: string,
  step: number,
  weightVersion: string,
): Promise<void> {
  const atTrainer = stack.checkpointsAt === 'trainer';
  // A trainer that keeps its own checkpoints starts from its model again: nothing to save before a step.
  if (atTrainer && step === 0) return;
  const path = atTrainer ? '' : join(outputDirectory, 'checkpoints', `step-${String(step).padStart(6, '0')}`);
  const saved = await trainer.saveCheckpoint({ path, rollout_id: step });
  await dataSource.save?.(join(outputDirectory, 'data-source'), step);
  await writeRunState(outputDirectory, {
    step,
    weight_version: weightVersion,
    checkpoint: saved.path === '' ? path : saved.path,
  });
}
