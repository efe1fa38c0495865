import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import * as tf from '@tensorflow/tfjs';
import { setWasmPaths } from '@tensorflow/tfjs-backend-wasm';

/** The backends {@link selectBackend} can choose, fastest first. */
export const backendCandidates = ['tensorflow-gpu', 'tensorflow', 'wasm', 'cpu'] as const;

/** One of {@link backendCandidates}. `tensorflow-gpu` and `tensorflow` are the native tfjs-node builds. */
export type BackendCandidate = (typeof backendCandidates)[number];

/** The npm package providing each native backend. */
export const nativeBackendPackages: Readonly<Record<'tensorflow-gpu' | 'tensorflow', string>> = {
  'tensorflow-gpu': '@tensorflow/tfjs-node-gpu',
  tensorflow: '@tensorflow/tfjs-node',
};

/** Options of {@link selectBackend}. */
export interface SelectBackendOptions {
  /** `auto` (default) walks {@link backendCandidates} in order; a name allows only that backend. */
  preference?: BackendCandidate | 'auto';
  /** Receives one line naming the chosen backend and why others were skipped. Default: console.info. */
  log?: (message: string) => void;
  /** Loads a native package (tests replace it). Default: dynamic `import()`. */
  importNative?: (packageName: string) => Promise<unknown>;
  /** Whether a native package's compiled addon is present (tests replace it). */
  hasNativeAddon?: (packageName: string) => boolean;
}

/** What {@link selectBackend} chose. */
export interface SelectedBackend {
  /** The tfjs backend name now active (`tensorflow`, `wasm` or `cpu`). */
  backend: string;
  /** Which candidate that is. */
  candidate: BackendCandidate;
  /** One entry per candidate skipped, with the reason. */
  skipped: string[];
}

const require = createRequire(import.meta.url);

/**
 * True when the package is installed and its native addon was built: an optional dependency whose
 * build script is denied is installed without `lib/napi-v*`.
 */
export function nativeAddonPresent(packageName: string): boolean {
  try {
    const root = dirname(require.resolve(`${packageName}/package.json`));
    const lib = join(root, 'lib');
    if (!existsSync(lib)) return false;
    return readdirSync(lib).some(
      (entry) => entry.startsWith('napi-v') && existsSync(join(lib, entry, 'tfjs_binding.node')),
    );
  } catch {
    return false;
  }
}

let wasmPathsSet = false;

function pointWasmAtPackageFiles(): void {
  if (wasmPathsSet) return;
  // The .wasm binaries ship in the backend package: load them from disk, never from a CDN.
  const file = require.resolve('@tensorflow/tfjs-backend-wasm/dist/tfjs-backend-wasm.wasm');
  setWasmPaths(`${dirname(file)}/`);
  wasmPathsSet = true;
}

async function activate(name: string): Promise<boolean> {
  if (tf.findBackend(name) === null && name !== 'wasm' && name !== 'cpu') return false;
  const ok = await tf.setBackend(name);
  if (ok) await tf.ready();
  return ok && tf.getBackend() === name;
}

function reason(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split('\n')[0] ?? text;
}

/**
 * Chooses the fastest tfjs backend that starts here: `@tensorflow/tfjs-node-gpu`, then
 * `@tensorflow/tfjs-node`, then wasm, then cpu, and logs the choice. At most ONE native package is
 * imported (the first whose compiled addon is present): importing a second registers every kernel
 * again. Both native packages are optional dependencies whose builds are denied by default, so on a
 * machine where nobody approved them this goes straight to wasm.
 *
 * @throws DressageError `unavailable` when no allowed backend starts.
 */
export async function selectBackend(options: SelectBackendOptions = {}): Promise<SelectedBackend> {
  const preference = options.preference ?? 'auto';
  const log = options.log ?? ((message: string) => console.info(message));
  const importNative = options.importNative ?? ((name: string) => import(name));
  const hasAddon = options.hasNativeAddon ?? nativeAddonPresent;
  const order: BackendCandidate[] = preference === 'auto' ? [...backendCandidates] : [preference];
  const skipped: string[] = [];
  let nativeTried = false;
  tf.enableProdMode();
  for (const candidate of order) {
    try {
      if (candidate === 'tensorflow-gpu' || candidate === 'tensorflow') {
        const packageName = nativeBackendPackages[candidate];
        if (nativeTried) {
          skipped.push(`${candidate}: skipped (only one native package is tried)`);
          continue;
        }
        if (!hasAddon(packageName)) {
          skipped.push(
            `${candidate}: ${packageName} has no compiled addon (build not approved or not installed)`,
          );
          continue;
        }
        nativeTried = true;
        await importNative(packageName);
        if (await activate('tensorflow')) return done('tensorflow', candidate);
        skipped.push(`${candidate}: ${packageName} loaded but the tensorflow backend did not start`);
        continue;
      }
      if (candidate === 'wasm') pointWasmAtPackageFiles();
      if (await activate(candidate)) return done(candidate, candidate);
      skipped.push(`${candidate}: did not start`);
    } catch (error) {
      skipped.push(`${candidate}: ${reason(error)}`);
    }
  }
  throw new DressageError({
    code: 'unavailable',
    message: `No tfjs backend could start (${skipped.join('; ')})`,
    details: { preference, skipped },
  });

  function done(backend: string, candidate: BackendCandidate): SelectedBackend {
    log(
      `tfjs backend: ${backend} (${candidate})${skipped.length > 0 ? `; skipped ${skipped.join('; ')}` : ''}`,
    );
    return { backend, candidate, skipped };
  }
}
