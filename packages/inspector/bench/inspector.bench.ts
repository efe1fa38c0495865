// Indexes 10k synthetic sessions once and pages/filters them, against a naive baseline that
// re-reads and re-parses the whole file on every request. Last line: one JSON object of figures.
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer } from '@dressage/tito';
import { TokenDecoder, tokenPage } from '../src/session-detail.js';
import { SessionIndex, type SessionQuery } from '../src/session-index.js';
import { loadSegmentFiles } from '../src/sources/segment-file.js';
import { defaultTokenizerDirectory } from '../src/start.js';

const sessionCount = Number(process.env.INSPECTOR_BENCH_SESSIONS ?? 10_000);
const tokensPerSegment = 128;

// A small deterministic generator so every run sees the same data.
let seed = 42;
function random(): number {
  seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
  return seed / 2 ** 31;
}

function syntheticFile(path: string): void {
  const lines: string[] = [];
  for (let session = 0; session < sessionCount; session++) {
    const segments = 1 + Math.floor(random() * 4);
    const reward = Math.round(random() * 100) / 100;
    const finish = random() < 0.05 ? 'length' : random() < 0.03 ? 'abort' : 'stop';
    for (let index = 0; index < segments; index++) {
      const tokens = Array.from({ length: tokensPerSegment }, () => Math.floor(random() * 150_000));
      const prompt = tokensPerSegment / 2;
      const version = String(1 + Math.floor(session / 50) + (random() < 0.1 ? index : 0));
      lines.push(
        JSON.stringify({
          uid: `s${session}-${index}`,
          session_id: `session-${session}`,
          trajectory_id: `session-${session}`,
          instance_id: `instance-${session % 1000}`,
          segment_index: index,
          segment_count: segments,
          messages: [{ role: 'user', content: 'hi' }],
          tools: null,
          tokens,
          full_loss_mask: tokens.map((_, position) => (position >= prompt ? 1 : 0)),
          full_logprobs: tokens.map((_, position) => (position >= prompt ? -random() : 0)),
          full_versions: tokens.map((_, position) => (position >= prompt ? version : '-1')),
          aligned_response_length: tokensPerSegment - prompt,
          finish_reason: finish,
          timestamp: 0,
          reward,
          extra_info: {
            segment_view: 'lineage',
            segment_reason: index === 0 ? 'initial' : 'history_rewrite',
          },
        }),
      );
    }
  }
  writeFileSync(path, `${lines.join('\n')}\n`);
}

const queries: SessionQuery[] = [
  { offset: 0, limit: 200 },
  { offset: 5000, limit: 200 },
  { rewardMin: 0.25, rewardMax: 0.75, limit: 200 },
  { truncated: true, limit: 200 },
  { multiVersion: true, segmentsMin: 3, limit: 200 },
  { search: 'instance-42', limit: 200 },
  { sort: '-reward', offset: 100, limit: 200 },
];

function milliseconds(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e6;
}

const folder = mkdtempSync(join(tmpdir(), 'inspector-bench-'));
try {
  const file = join(folder, 'segments.jsonl');
  syntheticFile(file);
  const fileMegabytes = statSync(file).size / 2 ** 20;

  let start = process.hrtime.bigint();
  const source = loadSegmentFiles([file]);
  const index = new SessionIndex(source.summaries);
  const indexLoadMs = milliseconds(start);

  const rounds = 50;
  start = process.hrtime.bigint();
  let matched = 0;
  for (let round = 0; round < rounds; round++)
    for (const query of queries) matched += index.query(query).items.length;
  const indexedQueryMs = milliseconds(start) / (rounds * queries.length);

  // Naive: every request re-reads, re-parses and re-summarises the whole file.
  const naiveRounds = 2;
  start = process.hrtime.bigint();
  for (let round = 0; round < naiveRounds; round++) {
    const query = queries[round % queries.length]!;
    matched += new SessionIndex(loadSegmentFiles([file]).summaries).query(query).items.length;
  }
  const naiveQueryMs = milliseconds(start) / naiveRounds;

  // Opening a session: one 32k-token segment decoded per token with the real Qwen3 tokenizer.
  const decoder = new TokenDecoder(await loadTokenizer(defaultTokenizerDirectory()));
  const longTokens = Array.from({ length: 32_768 }, () => Math.floor(random() * 150_000));
  const longSession = {
    id: 'long',
    sessionId: 'long',
    instanceId: null,
    trajectoryId: null,
    reward: null,
    status: 'completed',
    removed: false,
    step: null,
    metadata: {},
    segments: [
      {
        view: 'lineage' as const,
        index: 0,
        tokens: longTokens,
        lossMask: longTokens.map(() => 1),
        logprobs: longTokens.map(() => -0.5),
        versions: null,
        messages: [],
        reason: 'initial',
        reasons: ['initial'],
        finishReason: 'stop',
        extraInfo: {},
      },
    ],
  };
  start = process.hrtime.bigint();
  tokenPage(longSession, 'lineage', 0, decoder, 0, 2000);
  const firstTokenPageMs = milliseconds(start);
  start = process.hrtime.bigint();
  tokenPage(longSession, 'lineage', 0, decoder, 30_000, 2000);
  const warmTokenPageMs = milliseconds(start);

  const figures = {
    sessions: index.size,
    file_mb: Number(fileMegabytes.toFixed(1)),
    index_load_ms: Math.round(indexLoadMs),
    indexed_query_ms: Number(indexedQueryMs.toFixed(3)),
    naive_query_ms: Math.round(naiveQueryMs),
    speedup: Math.round(naiveQueryMs / indexedQueryMs),
    token_page_32k_cold_ms: Math.round(firstTokenPageMs),
    token_page_32k_warm_ms: Number(warmTokenPageMs.toFixed(1)),
    rows_matched: matched,
  };
  console.log(`indexed ${figures.sessions} sessions (${figures.file_mb} MB) in ${figures.index_load_ms} ms`);
  console.log(`query: indexed ${figures.indexed_query_ms} ms vs naive re-parse ${figures.naive_query_ms} ms`);
  console.log(JSON.stringify(figures));
} finally {
  rmSync(folder, { recursive: true, force: true });
}
