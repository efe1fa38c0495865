import {
  type RunningTrainerServer,
  type StartTrainerServerOptions,
  startTrainerServer,
} from '@dressage/trainer-bridge';
import { EmbeddedTrainer, type EmbeddedTrainerOptions } from './embedded-trainer.js';

/** Server settings of {@link startEmbeddedTrainerServer}. */
export type EmbeddedTrainerServerOptions = Pick<
  StartTrainerServerOptions,
  'address' | 'maxMessageBytes' | 'maxBatchTokens' | 'maxBatchSamples' | 'log'
>;

/** A running embedded TrainerService. */
export interface EmbeddedTrainerServer {
  readonly trainer: EmbeddedTrainer;
  /** `host:port` for `createTrainerClient`. */
  readonly address: string;
  readonly port: number;
  /** The underlying server. */
  readonly server: RunningTrainerServer;
  /**
   * Stops the server (calls in flight get `graceMs` to finish), then disposes the trainer when this
   * function created it.
   */
  close(graceMs?: number): Promise<void>;
}

/**
 * Serves TrainerService over gRPC for an {@link EmbeddedTrainer} (given, or created from its
 * options), on loopback and any free port unless `address` says otherwise.
 *
 * @example
 * ```ts
 * const served = await startEmbeddedTrainerServer({ model: engine.model, engine, temperature: 1 });
 * const client = createTrainerClient(served.address);
 * await client.train(batch, { loss: { learning_rate: 1e-3 } });
 * await client.updateWeights();
 * await served.close();
 * ```
 */
export async function startEmbeddedTrainerServer(
  trainer: EmbeddedTrainer | EmbeddedTrainerOptions,
  options: EmbeddedTrainerServerOptions = {},
): Promise<EmbeddedTrainerServer> {
  const owned = !(trainer instanceof EmbeddedTrainer);
  const instance = trainer instanceof EmbeddedTrainer ? trainer : new EmbeddedTrainer(trainer);
  let server: RunningTrainerServer;
  try {
    server = await startTrainerServer(instance, { address: '127.0.0.1:0', ...options });
  } catch (error) {
    if (owned) await instance.dispose();
    throw error;
  }
  return {
    trainer: instance,
    address: server.address,
    port: server.port,
    server,
    close: async (graceMs) => {
      await server.close(graceMs);
      if (owned) await instance.dispose();
    },
  };
}
