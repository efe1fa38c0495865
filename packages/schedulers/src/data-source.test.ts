import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { promptRecords } from './__fixtures__/generators.js';
import { dataSourceStateFile, PromptDataSource } from './data-source.js';
import { JsonlPromptStore } from './prompt-store.js';

let directory: string;

beforeEach(async () => {
  directory = await mkdtemp(join(tmpdir(), 'dressage-schedulers-'));
});

afterEach(async () => {
  await rm(directory, { recursive: true, force: true });
});

async function writeJsonl(name: string, lines: readonly unknown[], raw = false): Promise<string> {
  const file = join(directory, name);
  await writeFile(file, `${lines.map((line) => (raw ? String(line) : JSON.stringify(line))).join('\n')}\n`);
  return file;
}

function prompts(groups: readonly { prompt: unknown }[][]): unknown[] {
  return groups.map((group) => group[0]?.prompt);
}

describe('PromptDataSource over JSONL', () => {
  it('clones each prompt n times with a shared group_index and unique indexes', async () => {
    const file = await writeJsonl('p.jsonl', promptRecords(3));
    const source = await PromptDataSource.fromJsonl(file, { nSamplesPerPrompt: 2 });
    const groups = await source.getSamples(2);
    expect(groups.map((group) => group.map((sample) => [sample.group_index, sample.index]))).toEqual([
      [
        [0, 0],
        [0, 1],
      ],
      [
        [1, 2],
        [1, 3],
      ],
    ]);
    // Copies are independent.
    (groups[0]?.[0]?.metadata as Record<string, unknown>).touched = true;
    expect(groups[0]?.[1]?.metadata.touched).toBeUndefined();
    expect(groups[0]?.[0]?.label).toBe('l0');
  });

  it('passes top-level keys into metadata without overriding it, and stringifies labels', async () => {
    const file = await writeJsonl('p.jsonl', [
      {
        prompt: 'fix the bug',
        label: { tests: 3 },
        metadata: { instance_id: 'inst-1', reward_fn: 'contains_label' },
        reward_fn: 'exact_match',
        env_type: 'swe',
        agent_mode: 'blackbox',
        custom_field: [1, 2],
        generate_function_path: 'my.generate',
      },
    ]);
    const source = await PromptDataSource.fromJsonl(file);
    const [group] = await source.getSamples(1);
    const sample = group?.[0];
    expect(sample?.label).toBe('{"tests":3}');
    expect(sample?.metadata).toMatchObject({
      instance_id: 'inst-1',
      reward_fn: 'contains_label',
      env_type: 'swe',
      agent_mode: 'blackbox',
      custom_field: [1, 2],
      generate_function_path: 'my.generate',
    });
    expect(sample?.generate_function_path).toBe('my.generate');
    expect(sample?.metadata.prompt).toBeUndefined();
  });

  it('honours custom keys and gives records without instance_id a stable one', async () => {
    const file = await writeJsonl('custom.jsonl', [{ question: 'q0', answer: 7, extra: { a: 1 } }]);
    const source = await PromptDataSource.fromJsonl(file, {
      inputKey: 'question',
      labelKey: 'answer',
      metadataKey: 'extra',
    });
    const [[sample] = []] = await source.getSamples(1);
    expect(sample?.prompt).toBe('q0');
    expect(sample?.label).toBe('7');
    expect(sample?.metadata).toEqual({ a: 1, instance_id: 'custom.jsonl:1' });
  });

  it('skips blank lines but keeps real line numbers in errors', async () => {
    const file = await writeJsonl(
      'bad.jsonl',
      ['{"prompt":"a"}', '', '   ', '{"prompt":"b","metadata":{"sandbox_timeout_sec":"x"}}'],
      true,
    );
    const source = await PromptDataSource.fromJsonl(file);
    expect(source.size).toBe(2);
    await source.getSamples(1);
    const error = await source.getSamples(1).catch((caught: unknown) => caught);
    expect(DressageError.isInstance(error)).toBe(true);
    expect((error as DressageError).message).toContain(`${file}:4: metadata.sandbox_timeout_sec`);
    expect((error as DressageError).details).toMatchObject({
      file,
      line: 4,
      field: 'metadata.sandbox_timeout_sec',
    });
  });

  it('reports invalid JSON and missing prompts with file and line', async () => {
    const file = await writeJsonl('broken.jsonl', ['{"prompt":"a"}', '{"prompt":', '{"label":"x"}'], true);
    const source = await PromptDataSource.fromJsonl(file);
    await expect(source.validateAll()).rejects.toThrow(`${file}:2: (root): not valid JSON`);
    await expect(PromptDataSource.fromJsonl(file, { validateOnOpen: true })).rejects.toThrow(
      /broken\.jsonl:2/,
    );
    const second = await writeJsonl('noprompt.jsonl', ['{"label":"x"}'], true);
    await expect((await PromptDataSource.fromJsonl(second)).getSamples(1)).rejects.toThrow(
      `${second}:1: prompt:`,
    );
  });

  it('handles a byte-order mark, CRLF line ends and a last line without newline', async () => {
    const file = join(directory, 'bom.jsonl');
    await writeFile(file, '\uFEFF{"prompt":"a"}\r\n{"prompt":"b"}');
    const source = await PromptDataSource.fromJsonl(file);
    expect(prompts(await source.getSamples(2))).toEqual(['a', 'b']);
  });

  it('wraps around epochs, reshuffling each epoch with seed + epoch', async () => {
    const file = await writeJsonl('p.jsonl', promptRecords(5));
    const plain = await PromptDataSource.fromJsonl(file);
    expect(prompts(await plain.getSamples(7))).toEqual(['p0', 'p1', 'p2', 'p3', 'p4', 'p0', 'p1']);
    expect(plain.epoch).toBe(1);

    const a = await PromptDataSource.fromJsonl(file, { shuffle: true, seed: 7 });
    const b = await PromptDataSource.fromJsonl(file, { shuffle: true, seed: 7 });
    const first = prompts(await a.getSamples(10));
    expect(prompts(await b.getSamples(10))).toEqual(first);
    // Each epoch is a permutation of all prompts, and the two epochs differ.
    expect([...first.slice(0, 5)].sort()).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect([...first.slice(5)].sort()).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(first.slice(0, 5)).not.toEqual(first.slice(5));
  });

  it('serves buffered groups first and checks their size', async () => {
    const source = PromptDataSource.fromRecords(promptRecords(4), { nSamplesPerPrompt: 2 });
    const [first = [], second = []] = await source.getSamples(2);
    source.addSamples([second]);
    expect(source.bufferLength).toBe(1);
    const next = await source.getSamples(2);
    expect(next.map((group) => group[0]?.prompt)).toEqual(['p1', 'p2']);
    expect(() => source.addSamples([first.slice(0, 1)])).toThrow(/n_samples_per_prompt is 2/);
  });

  it('saves and restores its position, buffer and shuffle order', async () => {
    const file = await writeJsonl('p.jsonl', promptRecords(6));
    const source = await PromptDataSource.fromJsonl(file, { shuffle: true, seed: 3, nSamplesPerPrompt: 2 });
    const taken = await source.getSamples(4);
    source.addSamples([taken[3] as never]);
    await source.save(directory, 5);
    await source.save(directory, 9);
    const expected = prompts(await source.getSamples(8));

    const resumed = await PromptDataSource.fromJsonl(file, { shuffle: true, seed: 3, nSamplesPerPrompt: 2 });
    expect(await resumed.load(directory)).toBe(9);
    expect(resumed.bufferLength).toBe(1);
    expect(prompts(await resumed.getSamples(8))).toEqual(expected);
    expect(dataSourceStateFile(directory, 9)).toMatch(/rollout\/global_dataset_state_dict_9\.json$/);

    const fresh = await PromptDataSource.fromJsonl(file);
    expect(await fresh.load(join(directory, 'nothing-here'))).toBeNull();
    await expect(fresh.load(directory, 4)).rejects.toThrow(/no saved data source state/);
  });

  it('continues indexes and group indexes after a restore', async () => {
    const source = PromptDataSource.fromRecords(promptRecords(3), { nSamplesPerPrompt: 2 });
    await source.getSamples(2);
    const state = source.state();
    const resumed = PromptDataSource.fromRecords(promptRecords(3), { nSamplesPerPrompt: 2 });
    resumed.restore(state);
    const [[sample] = []] = await resumed.getSamples(1);
    expect([sample?.group_index, sample?.index]).toEqual([2, 4]);
    expect(() => resumed.restore({ sample_offset: -1 })).toThrow(/sample_offset/);
  });

  it('streams a large file with a compact index', async () => {
    const file = join(directory, 'large.jsonl');
    const count = 200_000;
    const lines: string[] = [];
    for (let i = 0; i < count; i++) lines.push(`{"prompt":"prompt number ${i}","label":"${i % 10}"}`);
    await writeFile(file, `${lines.join('\n')}\n`);
    const store = await JsonlPromptStore.open(file);
    // 16 bytes of index per line, however long the lines are.
    expect(store.indexBytes).toBe(16 * count);
    const source = new PromptDataSource(store, { shuffle: true, seed: 1 });
    expect(source.size).toBe(count);
    const groups = await source.getSamples(3);
    for (const group of groups) {
      const number = Number(String(group[0]?.prompt).replace('prompt number ', ''));
      expect(group[0]?.label).toBe(String(number % 10));
    }
  });

  it('fails clearly on an empty data set', async () => {
    const file = await writeJsonl('empty.jsonl', [], true);
    const source = await PromptDataSource.fromJsonl(file);
    expect(source.size).toBe(0);
    await expect(source.getSamples(1)).rejects.toThrow(/empty/);
    expect(await source.getSamples(0)).toEqual([]);
  });
});
