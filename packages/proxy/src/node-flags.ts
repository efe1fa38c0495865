import { fullHeapGrowingPercent } from './heap-growth.js';

// The V8 flags the proxy runs with: its bin's shebang carries them (a test checks that it does),
// the trainer's `dressage proxy` passes a bin's shebang flags on, and the benches start their
// servers with them so the proxy is measured as deployed.

/**
 * V8 flags for a proxy process.
 *
 * - `--max-semi-space-size=128`: hundreds of concurrent calls keep their request objects alive
 *   across engine round trips; with V8's default young generation they are promoted and collected
 *   as old objects (about 20% of the CPU per request at 512 sessions; 128 MiB semi-spaces take
 *   another ~4% off 64 MiB ones).
 * - `--incremental-marking-soft-trigger=50`, `--incremental-marking-hard-trigger=90`: start
 *   marking the old generation when half of its allowed growth since the last full collection is
 *   used (at once at 90%). Without them Node 20's V8 starts marking again as soon as a full
 *   collection ends whenever the growth it allows is below the young generation's size: with a
 *   large young generation and the proxy's few old objects (the tokenizer and the sessions) that
 *   is always, and long sessions then spent 2–4 ms a request in full collections.
 * - `--heap-growing-percent=100`: the old generation may double after a full collection before the
 *   next. V8 otherwise derives that growth from how fast it collects against how fast the program
 *   allocates, and for the proxy (whose Buffers, request bodies mostly, count as growth) it
 *   settled in some runs near its minimum of 10%: a full collection every second or so, 6.5–8.2
 *   ms a request with 64 long sessions instead of 3.3–3.7, in 5 of 12 workload runs.
 *
 * Node refuses these V8 flags in `NODE_OPTIONS`: pass them on the command line.
 */
export const proxyNodeFlags: readonly string[] = [
  '--max-semi-space-size=128',
  '--incremental-marking-soft-trigger=50',
  '--incremental-marking-hard-trigger=90',
  `--heap-growing-percent=${fullHeapGrowingPercent}`,
];
