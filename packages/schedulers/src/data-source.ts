import { mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import {
  createPromptRecordSchema,
  createSample,
  DressageError,
  type PromptKeys,
  type Sample,
  safeParseWire,
  sampleSchema,
} from '@dressage/protocol';
import { z } from 'zod';
import {
  InMemoryPromptStore,
  JsonlPromptStore,
  type PromptStore,
  type StoredPromptRecord,
} from './prompt-store.js';
import { seededPermutation } from './seeded-shuffle.js';

/**
 * What the schedulers need from a data source: groups of samples to roll out, and a way to put
 * groups back (retries, partial rollouts). Groups put back are served first.
 */
export interface RolloutDataSource {
  /** The next `count` groups: buffered groups first, then fresh prompts. */
  getSamples(count: number): Promise<Sample[][]>;
  /** Re-queues groups; the next {@link getSamples} serves them before any fresh prompt. */
  addSamples(groups: readonly (readonly Sample[])[]): void;
}

/** Options of a {@link PromptDataSource}. */
export interface PromptDataSourceOptions extends PromptKeys {
  /** Copies of each prompt per group (slime `n_samples_per_prompt`). Default 1. */
  nSamplesPerPrompt?: number;
  /** Reshuffle every epoch with seed `seed + epoch` (slime `rollout_shuffle`). Default false. */
  shuffle?: boolean;
  /** slime `rollout_seed`. Default 42. */
  seed?: number;
  /** Parse every record while opening so a bad line fails at start-up. Default false (checked when served). */
  validateOnOpen?: boolean;
}

/** The serialisable position of a data source (slime's dataset state dict, plus the buffer). */
export const dataSourceStateSchema = z.object({
  sample_offset: z.int().nonnegative(),
  epoch_id: z.int().nonnegative(),
  sample_group_index: z.int().nonnegative(),
  sample_index: z.int().nonnegative(),
  metadata: z.record(z.string(), z.unknown()).default({}),
  buffer: z.array(z.array(sampleSchema)).default([]),
});

/** The serialisable position of a data source. */
export type DataSourceState = z.output<typeof dataSourceStateSchema>;

// Keys of a record that name the prompt itself; every other top-level key is passed into metadata.
const defaultKeys = { inputKey: 'prompt', labelKey: 'label', metadataKey: 'metadata' } as const;

function stringifyLabel(label: unknown): string | null {
  if (label === undefined || label === null) return null;
  if (typeof label === 'string') return label;
  return JSON.stringify(label);
}

/** The file of a saved state, as slime names it (JSON instead of a pickle). */
export function dataSourceStateFile(directory: string, rolloutId: number): string {
  return join(directory, 'rollout', `global_dataset_state_dict_${rolloutId}.json`);
}

/**
 * Prompt groups from a prompt store (a JSONL file or records in memory): each prompt becomes a group
 * of `nSamplesPerPrompt` samples with one shared `group_index` and a unique `index` each. Groups put
 * back with {@link addSamples} are served first; prompts wrap around at the end of an epoch, optionally
 * reshuffled with a seed per epoch. Its position (and buffer) can be saved and restored.
 */
export class PromptDataSource implements RolloutDataSource {
  readonly #keys: Required<PromptKeys>;
  readonly #recordSchema: ReturnType<typeof createPromptRecordSchema>;
  readonly #nSamplesPerPrompt: number;
  readonly #shuffle: boolean;
  readonly #seed: number;
  #buffer: Sample[][] = [];
  #order: Uint32Array | null = null;
  #sampleOffset = 0;
  #epochId = 0;
  #sampleGroupIndex = 0;
  #sampleIndex = 0;
  #metadata: Record<string, unknown> = {};

  readonly #store: PromptStore;

  constructor(store: PromptStore, options: PromptDataSourceOptions = {}) {
    this.#store = store;
    this.#keys = {
      inputKey: options.inputKey ?? defaultKeys.inputKey,
      labelKey: options.labelKey ?? defaultKeys.labelKey,
      metadataKey: options.metadataKey ?? defaultKeys.metadataKey,
    };
    this.#recordSchema = createPromptRecordSchema(this.#keys);
    this.#nSamplesPerPrompt = options.nSamplesPerPrompt ?? 1;
    if (!Number.isInteger(this.#nSamplesPerPrompt) || this.#nSamplesPerPrompt < 1) {
      throw new DressageError({
        code: 'invalid_argument',
        message: `nSamplesPerPrompt must be a positive integer, got ${this.#nSamplesPerPrompt}`,
      });
    }
    this.#shuffle = options.shuffle ?? false;
    this.#seed = options.seed ?? 42;
    this.#reorder();
  }

  /** Opens a JSONL prompt file (streamed; never held in memory whole). */
  static async fromJsonl(path: string, options: PromptDataSourceOptions = {}): Promise<PromptDataSource> {
    const source = new PromptDataSource(await JsonlPromptStore.open(path), options);
    if (options.validateOnOpen) await source.validateAll();
    return source;
  }

  /** A data source over records already in memory, validated like file lines. */
  static fromRecords(records: readonly unknown[], options: PromptDataSourceOptions = {}): PromptDataSource {
    return new PromptDataSource(new InMemoryPromptStore(records), options);
  }

  /** Prompts per epoch. */
  get size(): number {
    return this.#store.size;
  }

  /** Groups waiting in the buffer. */
  get bufferLength(): number {
    return this.#buffer.length;
  }

  /** The current epoch (0-based). */
  get epoch(): number {
    return this.#epochId;
  }

  /** Parses every record once, failing on the first bad one. Reads in bounded chunks. */
  async validateAll(): Promise<void> {
    const chunk = 4096;
    for (let start = 0; start < this.#store.size; start += chunk) {
      const positions = Array.from(
        { length: Math.min(chunk, this.#store.size - start) },
        (_, i) => start + i,
      );
      for (const record of await this.#store.read(positions)) this.#parseRecord(record);
    }
  }

  async getSamples(count: number): Promise<Sample[][]> {
    if (!Number.isInteger(count) || count < 0) {
      throw new DressageError({ code: 'invalid_argument', message: `cannot get ${count} groups` });
    }
    const groups = this.#buffer.splice(0, count);
    const missing = count - groups.length;
    if (missing === 0) return groups;
    if (this.#store.size === 0) {
      throw new DressageError({
        code: 'failed_precondition',
        message: `the prompt data set is empty; ${missing} more group(s) were requested`,
      });
    }
    const positions: number[] = [];
    for (let i = 0; i < missing; i++) {
      if (this.#sampleOffset >= this.#store.size) {
        this.#epochId++;
        this.#sampleOffset = 0;
        this.#reorder();
      }
      positions.push(this.#position(this.#sampleOffset++));
    }
    for (const record of await this.#store.read(positions)) groups.push(this.#makeGroup(record));
    return groups;
  }

  addSamples(groups: readonly (readonly Sample[])[]): void {
    for (const [position, group] of groups.entries()) {
      if (group.length !== this.#nSamplesPerPrompt) {
        throw new DressageError({
          code: 'invalid_argument',
          message: `group ${position} has ${group.length} samples; n_samples_per_prompt is ${this.#nSamplesPerPrompt}`,
          details: { group: position, size: group.length, expected: this.#nSamplesPerPrompt },
        });
      }
    }
    for (const group of groups) this.#buffer.push([...group]);
  }

  /** Free-form metadata saved with the position (slime's `update_metadata`). */
  updateMetadata(metadata: Record<string, unknown>): void {
    this.#metadata = { ...this.#metadata, ...metadata };
  }

  /** The saved metadata. */
  getMetadata(): Record<string, unknown> {
    return { ...this.#metadata };
  }

  /** The current position, buffer included. */
  state(): DataSourceState {
    return {
      sample_offset: this.#sampleOffset,
      epoch_id: this.#epochId,
      sample_group_index: this.#sampleGroupIndex,
      sample_index: this.#sampleIndex,
      metadata: structuredClone(this.#metadata),
      buffer: structuredClone(this.#buffer),
    };
  }

  /** Restores a position taken with {@link state} (the shuffle order is recomputed from the seed). */
  restore(state: unknown): void {
    const parsed = safeParseWire(dataSourceStateSchema, state, 'data source state');
    if (!parsed.success) throw parsed.error;
    const { data } = parsed;
    this.#sampleOffset = data.sample_offset;
    this.#epochId = data.epoch_id;
    this.#sampleGroupIndex = data.sample_group_index;
    this.#sampleIndex = data.sample_index;
    this.#metadata = data.metadata;
    this.#buffer = data.buffer;
    this.#reorder();
  }

  /** Writes the state to `{directory}/rollout/global_dataset_state_dict_{rolloutId}.json` (atomically). */
  async save(directory: string, rolloutId: number): Promise<string> {
    const file = dataSourceStateFile(directory, rolloutId);
    await mkdir(join(directory, 'rollout'), { recursive: true });
    const temporary = `${file}.tmp-${process.pid}`;
    await writeFile(temporary, JSON.stringify(this.state()));
    await rename(temporary, file);
    return file;
  }

  /**
   * Restores the state saved for `rolloutId`, or the newest one when omitted. Returns the rollout id
   * loaded, or null when nothing was saved yet (a fresh start).
   */
  async load(directory: string, rolloutId?: number): Promise<number | null> {
    let id = rolloutId;
    if (id === undefined) {
      let names: string[];
      try {
        names = await readdir(join(directory, 'rollout'));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
        throw error;
      }
      const ids = names
        .map((name) => /^global_dataset_state_dict_(\d+)\.json$/.exec(name)?.[1])
        .filter((match): match is string => match !== undefined)
        .map(Number);
      if (ids.length === 0) return null;
      id = Math.max(...ids);
    }
    const file = dataSourceStateFile(directory, id);
    let text: string;
    try {
      text = await readFile(file, 'utf8');
    } catch (error) {
      throw new DressageError({
        code: 'not_found',
        message: `no saved data source state at ${file}`,
        cause: error,
        details: { file },
      });
    }
    this.restore(JSON.parse(text));
    return id;
  }

  #reorder(): void {
    // Without shuffling the identity order is implicit; no array is needed.
    this.#order = this.#shuffle ? seededPermutation(this.#store.size, this.#seed + this.#epochId) : null;
  }

  #position(offset: number): number {
    return this.#order === null ? offset : (this.#order[offset] as number);
  }

  #fail(record: StoredPromptRecord, field: string, message: string, cause?: unknown): never {
    const where =
      record.text === null ? `${record.source} record ${record.line}` : `${record.source}:${record.line}`;
    throw new DressageError({
      code: 'invalid_argument',
      message: `${where}: ${field}: ${message}`,
      cause,
      details: { file: record.source, line: record.line, field },
    });
  }

  #parseRecord(record: StoredPromptRecord): z.output<ReturnType<typeof createPromptRecordSchema>> {
    let value = record.value;
    if (record.text !== null) {
      try {
        value = JSON.parse(record.text);
      } catch (error) {
        this.#fail(record, '(root)', `not valid JSON (${(error as Error).message})`, error);
      }
    }
    const parsed = safeParseWire(this.#recordSchema, value, 'prompt record');
    if (!parsed.success) {
      const issues = (parsed.error.details.issues ?? []) as { path: string; message: string }[];
      const first = issues[0] ?? { path: '(root)', message: parsed.error.message };
      this.#fail(record, first.path, first.message, parsed.error);
    }
    return parsed.data;
  }

  #makeGroup(record: StoredPromptRecord): Sample[] {
    const data = this.#parseRecord(record);
    const { inputKey, labelKey, metadataKey } = this.#keys;
    const metadata: Record<string, unknown> = structuredClone(
      (data[metadataKey] as Record<string, unknown> | undefined) ?? {},
    );
    // Every other top-level key (agent_mode, env_type, reward_fn, ...) is passed through, without
    // overriding what the record's metadata already says.
    for (const [key, value] of Object.entries(data)) {
      if (key === inputKey || key === labelKey || key === metadataKey || key in metadata) continue;
      metadata[key] = structuredClone(value);
    }
    // Prompt-equal aggregation groups samples by instance; a record without one gets a stable id
    // from its place in the file, so every copy and every epoch agree.
    if (typeof metadata.instance_id !== 'string' || metadata.instance_id === '') {
      metadata.instance_id = `${basename(record.source)}:${record.line}`;
    }
    const generatePath =
      typeof data.generate_function_path === 'string'
        ? data.generate_function_path
        : typeof metadata.generate_function_path === 'string'
          ? metadata.generate_function_path
          : null;
    const template = createSample({
      prompt: data[inputKey] as Sample['prompt'],
      label: stringifyLabel(data[labelKey]),
      metadata,
      generate_function_path: generatePath,
    });
    const groupIndex = this.#sampleGroupIndex++;
    const group: Sample[] = [];
    for (let copy = 0; copy < this.#nSamplesPerPrompt; copy++) {
      group.push({ ...structuredClone(template), group_index: groupIndex, index: this.#sampleIndex++ });
    }
    return group;
  }
}
