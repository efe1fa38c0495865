// The `/generate` body's ids, written whole on every request (`idsJson`, the baseline) against
// continued from the history's previous body (`IdsBodyCache`, as the engine client does): 64
// sessions taking turns, each history growing by a turn of tool output and an answer (about 1,500
// ids) to 68K ids, as in the reference's workload. CPU time per body, best of five alternated runs,
// less the harness's own (the histories growing, measured alone in the same runs); every body of the
// cache is checked against the baseline's bytes once. The last line is one JSON object.
import { IdsBodyCache } from '../src/ids-body-cache.js';
import { idsJson } from '../src/ids-json.js';
import { PromptIds } from '../src/prompt-ids.js';
import { TokenBuffer } from '../src/token-buffer.js';

const sessions = 64;
const targetIds = 68_000;
const idsPerTurn = 1_500;
const turns = Math.ceil(targetIds / idsPerTurn);
const after = '],"sampling_params":{"temperature":1},"return_logprob":true,"rid":"dressage-bench"}';

// Ids as a vocabulary spreads them (most below 100K, a few up to Qwen3's 151,669), from a fixed seed.
let seed = 12345;
const nextId = () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return seed % 10 === 0 ? 100_000 + (seed % 51_669) : seed % 100_000;
};
const turnIds = Array.from({ length: turns }, () => Int32Array.from({ length: idsPerTurn }, nextId));
const tail = Int32Array.from({ length: 40 }, nextId);

// One pass: every session's conversation, the sessions taking turns; returns CPU microseconds per body.
function pass(
  write: (prompt: PromptIds) => Buffer,
  check?: (prompt: PromptIds, bytes: Buffer) => void,
): number {
  const buffers = Array.from({ length: sessions }, () => new TokenBuffer(1024));
  const start = process.cpuUsage();
  let bodies = 0;
  for (let turn = 0; turn < turns; turn++) {
    for (const buffer of buffers) {
      buffer.appendContext(turnIds[turn]!);
      const prompt = new PromptIds(buffer, buffer.length, tail);
      const body = write(prompt);
      check?.(prompt, body);
      bodies++;
    }
  }
  const used = process.cpuUsage(start);
  return (used.user + used.system) / bodies;
}

const whole = (prompt: PromptIds) => idsJson('{"input_ids":[', prompt, after);
let cache = new IdsBodyCache();
const continued = (prompt: PromptIds) => {
  const body = cache.body('{"input_ids":[', prompt, after);
  body.release(true);
  return body.bytes;
};

// Checked once: the continued bodies are the whole ones, byte for byte.
pass(continued, (prompt, bytes) => {
  if (!bytes.equals(whole(prompt))) throw new Error('a continued body differs from the whole one');
});
const emptyBody = Buffer.alloc(0);
const harness = () => emptyBody;
const best = {
  harness: Number.POSITIVE_INFINITY,
  whole: Number.POSITIVE_INFINITY,
  continued: Number.POSITIVE_INFINITY,
};
for (let run = 0; run < 5; run++) {
  best.harness = Math.min(best.harness, pass(harness));
  best.whole = Math.min(best.whole, pass(whole));
  cache = new IdsBodyCache();
  best.continued = Math.min(best.continued, pass(continued));
}
best.whole -= best.harness;
best.continued -= best.harness;
console.log(
  `${sessions} sessions x ${turns} turns to ${turns * idsPerTurn} ids: whole body ${best.whole.toFixed(1)} us, continued ${best.continued.toFixed(1)} us a body (${(best.whole / best.continued).toFixed(1)}x; the harness's ${best.harness.toFixed(1)} us subtracted); kept ${(cache.keptBytes / 1024 ** 2).toFixed(1)} MiB`,
);
console.log(
  JSON.stringify({
    ids_body_whole_us: Number(best.whole.toFixed(1)),
    ids_body_continued_us: Number(best.continued.toFixed(1)),
    ids_body_speedup: Number((best.whole / best.continued).toFixed(2)),
    ids_body_kept_mib: Number((cache.keptBytes / 1024 ** 2).toFixed(1)),
  }),
);
