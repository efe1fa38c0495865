import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';

/** The tfjs backends the embedded model runs on. */
export type BackendName = 'wasm' | 'cpu';

/** Which backend to use: one by name, or `auto` (wasm, falling back to cpu). */
export type BackendPreference = BackendName | 'auto';

/** Options of {@link initializeBackend}. */
export interface InitializeBackendOptions {
  /** Default `auto`. */
  backend?: BackendPreference;
  /** Receives one line naming the chosen backend (and why a fallback happened). */
  log?: (message: string) => void;
}

let wasmPathsSet = false;

function pointWasmAtPackageFiles(): void {
  if (wasmPathsSet) return;
  // The .wasm binaries ship inside the backend package: load them from disk, never from a CDN.
  const require = createRequire(import.meta.url);
  const file = require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm');
  setWasmPaths(`${dirname(file)}/`);
  wasmPathsSet = true;
}

async function trySetBackend(name: BackendName): Promise<{ ok: boolean; error: unknown }> {
  try {
    if (name === 'wasm') pointWasmAtPackageFiles();
    const ok = await tf.setBackend(name);
    if (ok) await tf.ready();
    return { ok: ok && tf.getBackend() === name, error: null };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * Selects the tfjs backend for the embedded model. `auto` prefers wasm (several times faster than
 * the pure-JS cpu backend on small transformers) and falls back to cpu. Native backends are chosen
 * elsewhere; this never loads them.
 *
 * @returns the backend now active.
 * @throws DressageError `unavailable` when a named backend cannot start.
 */
export async function initializeBackend(options: InitializeBackendOptions = {}): Promise<BackendName> {
  const preference = options.backend ?? 'auto';
  // Production mode skips tfjs debug checks and its "install the node backend" banner.
  tf.enableProdMode();
  const order: BackendName[] = preference === 'auto' ? ['wasm', 'cpu'] : [preference];
  const failures: string[] = [];
  for (const name of order) {
    if (tf.getBackend() === name && tf.findBackend(name) !== null) {
      options.log?.(`tfjs backend: ${name}`);
      return name;
    }
    const { ok, error } = await trySetBackend(name);
    if (ok) {
      const note = failures.length > 0 ? ` (after ${failures.join('; ')})` : '';
      options.log?.(`tfjs backend: ${name}${note}`);
      return name;
    }
    failures.push(
      `${name} failed: ${error instanceof Error ? error.message : String(error ?? 'not available')}`,
    );
  }
  throw new DressageError({
    code: 'unavailable',
    message: `No tfjs backend could start: ${failures.join('; ')}`,
    details: { preference },
  });
}

/** The active tfjs backend's name. */
export function activeBackend(): string {
  return tf.getBackend();
}
