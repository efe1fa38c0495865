// The TrainerService of an embedded stack: which one the recipe asks for, and starting it in this
// process or in worker processes.
import { join } from 'node:path';
import {
  type CausalLanguageModel,
  type InferenceEngine,
  saveCheckpoint,
  startEmbeddedTrainerServer,
} from '@dressage/embedded';
import { createTrainerClient, type TrainerClient } from '@dressage/trainer-bridge';
import type { EmbeddedStackOptions } from './embedded-stack.js';
import type { Recipe } from './recipe.js';
import { startTrainerWorker } from './trainer-worker.js';

/** The TrainerService of an embedded stack, whichever process runs it. */
export interface StackTrainer {
  trainer: TrainerClient;
  address: string;
  description: string;
  takeTrainLogProbs?: () => Float32Array | null;
  close(): Promise<void>;
}

/** How an embedded stack's TrainerService starts, from the recipe's `trainer` section. */
export type TrainerStart =
  | {
      /** The embedded trainer in this process. */
      kind: 'embedded';
      temperature: number;
      learningRate: number;
    }
  | {
      /** A TrainerService already running at `address`. */
      kind: 'address';
      address: string;
      clientOptions: { trainDeadlineMs: number };
    }
  | {
      /** The Python worker the stack starts (`trainer.worker`). */
      kind: 'worker';
      python: string;
      workerDirectory: string;
      /** Where the engine's initial weights are written for the worker's `--model`. */
      initialWeights: string;
      /** The worker's flags after `--port 0`. */
      args: string[];
      actor: string;
      processes: number;
      clientOptions: { trainDeadlineMs: number };
    };

/**
 * The {@link TrainerStart} of a recipe: for `trainer.worker`, every setting as the worker's flag
 * (`threads` as `--threads`, `args` last, so they can override the others).
 */
export function trainerStartOf(
  recipe: Recipe,
  options: { engineUrl: string; outputDirectory: string; resolvePath?: (path: string) => string },
): TrainerStart {
  if (recipe.trainer.kind === 'embedded') {
    return {
      kind: 'embedded',
      temperature: recipe.rollout.temperature,
      learningRate: recipe.loss.learning_rate,
    };
  }
  const settings = recipe.trainer;
  const clientOptions = { trainDeadlineMs: settings.deadline_seconds * 1000 };
  if (settings.worker === undefined) {
    return { kind: 'address', address: settings.address as string, clientOptions };
  }
  const worker = settings.worker;
  const initialWeights = join(options.outputDirectory, 'trainer-initial-weights');
  return {
    kind: 'worker',
    python: worker.python,
    workerDirectory:
      options.resolvePath === undefined ? worker.worker_dir : options.resolvePath(worker.worker_dir),
    initialWeights,
    args: [
      '--actor',
      worker.actor,
      '--model',
      initialWeights,
      '--engine-url',
      options.engineUrl,
      '--weights-dir',
      join(options.outputDirectory, 'published-weights'),
      '--temperature',
      String(recipe.rollout.temperature),
      '--learning-rate',
      String(recipe.loss.learning_rate),
      '--processes',
      String(worker.processes),
      '--threads',
      String(worker.threads),
      ...worker.args,
    ],
    actor: worker.actor,
    processes: worker.processes,
    clientOptions,
  };
}

/**
 * The embedded trainer in this process; or, for `trainer.kind: grpc`, the worker the recipe starts
 * (`trainer.worker`: given the engine's initial weights as a checkpoint, publishing every update
 * to the engine's `/update_weights_from_disk`) or a TrainerService already running at `address`.
 */
export async function startTrainerService(
  options: EmbeddedStackOptions,
  serving: {
    servingModel: CausalLanguageModel;
    /** The engine when it runs in this process; else it is reached at `engineUrl`. */
    engine: InferenceEngine | undefined;
    engineUrl: string;
    weightVersion: string;
  },
): Promise<StackTrainer> {
  const start = trainerStartOf(options.recipe, {
    engineUrl: serving.engineUrl,
    outputDirectory: options.outputDirectory,
    ...(options.resolvePath === undefined ? {} : { resolvePath: options.resolvePath }),
  });
  if (start.kind === 'embedded') {
    let trainLogProbs: Float32Array | null = null;
    const server = await startEmbeddedTrainerServer({
      model: serving.servingModel,
      ...(serving.engine === undefined
        ? {
            engineUrls: [serving.engineUrl],
            weightsDirectory: join(options.outputDirectory, 'engine', 'weights'),
          }
        : { engine: serving.engine }),
      weightVersion: serving.weightVersion,
      temperature: start.temperature,
      learningRate: start.learningRate,
      onTrainLogProbs: (logProbs) => {
        trainLogProbs = logProbs;
      },
    });
    return {
      trainer: createTrainerClient(server.address),
      address: server.address,
      description: server.address,
      takeTrainLogProbs() {
        const taken = trainLogProbs;
        trainLogProbs = null;
        return taken;
      },
      close: () => server.close(),
    };
  }
  if (start.kind === 'address') {
    return {
      trainer: createTrainerClient(start.address, start.clientOptions),
      address: start.address,
      description: start.address,
      close: async () => {},
    };
  }
  await saveCheckpoint(start.initialWeights, serving.servingModel, { weightVersion: serving.weightVersion });
  const started = await startTrainerWorker({
    python: start.python,
    workerDirectory: start.workerDirectory,
    args: start.args,
  });
  return {
    trainer: createTrainerClient(started.address, start.clientOptions),
    address: started.address,
    description: `${started.address} (${start.actor} worker, ${start.processes} process${start.processes === 1 ? '' : 'es'})`,
    close: () => started.close(),
  };
}
