// Benchmark: what routing a request costs. The proxy's route table (eleven literal routes and two
// session-prefixed patterns) is timed on its hot request (`POST /v1/chat/completions`) and on a
// session base URL, against the hand-written dispatch it replaced, in the same run: the path cut at
// `?` and trailing slashes by a regular expression, the `/s/{session}` prefix split off and decoded,
// one `Map.get` and a method compare. Figures are nanoseconds per request; the proxy spends about
// 200 µs of CPU per request, so differences of a few hundred nanoseconds are below what its own
// benchmark resolves. Last output line: one JSON object of headline figures.
import { RouteTable, requestPath } from '../src/http.js';

const ROUNDS = 7;
const ITERATIONS = 1_000_000;

interface Route {
  method: string;
  name: string;
}

const literalPaths: Array<[string, string]> = [
  ['GET', '/v1/models'],
  ['POST', '/v1/chat/completions'],
  ['POST', '/session/finalize'],
  ['POST', '/session/discard'],
  ['POST', '/trajectory/read'],
  ['GET', '/trajectory/stats'],
  ['POST', '/v1/rollout/pause'],
  ['POST', '/v1/rollout/resume'],
  ['GET', '/v1/rollout/pause_state'],
  ['GET', '/integration/capabilities'],
  ['GET', '/health'],
];

const table = new RouteTable<Route>();
const baseline = new Map<string, Route>();
for (const [method, path] of literalPaths) {
  table.add(method, path, { method, name: path });
  baseline.set(path, { method, name: path });
}
table.add('GET', '/s/{session}/v1/models', { method: 'GET', name: 'session models' });
table.add('POST', '/s/{session}/v1/chat/completions', { method: 'POST', name: 'session chat' });

// The dispatch the proxy had before the route table.
function handWritten(target: string): { session: string | null; route: Route | undefined } {
  let path = target.split('?')[0]!.replace(/\/+$/, '') || '/';
  let session: string | null = null;
  if (path.startsWith('/s/')) {
    const end = path.indexOf('/', 3);
    session = decodeURIComponent(end === -1 ? path.slice(3) : path.slice(3, end));
    path = end === -1 ? '/' : path.slice(end);
  }
  return { session, route: baseline.get(path) };
}

// Each loop consumes its result so the JIT cannot drop the work.
function timeBaseline(target: string): number {
  let hits = 0;
  const started = process.hrtime.bigint();
  for (let index = 0; index < ITERATIONS; index++) {
    const { route } = handWritten(target);
    if (route !== undefined && route.method === 'POST') hits++;
  }
  const elapsed = Number(process.hrtime.bigint() - started);
  if (hits !== ITERATIONS) throw new Error('baseline missed');
  return elapsed / ITERATIONS;
}

function timeTable(target: string): number {
  let hits = 0;
  const started = process.hrtime.bigint();
  for (let index = 0; index < ITERATIONS; index++) {
    const found = table.lookup('POST', requestPath(target));
    if (found.kind === 'found') hits++;
  }
  const elapsed = Number(process.hrtime.bigint() - started);
  if (hits !== ITERATIONS) throw new Error('table missed');
  return elapsed / ITERATIONS;
}

const literalTarget = '/v1/chat/completions';
const sessionTarget = '/s/rollout%3A7/v1/chat/completions';
const best = { literalBaseline: Infinity, literal: Infinity, sessionBaseline: Infinity, session: Infinity };
for (let round = 0; round < ROUNDS; round++) {
  best.literalBaseline = Math.min(best.literalBaseline, timeBaseline(literalTarget));
  best.literal = Math.min(best.literal, timeTable(literalTarget));
  best.sessionBaseline = Math.min(best.sessionBaseline, timeBaseline(sessionTarget));
  best.session = Math.min(best.session, timeTable(sessionTarget));
}
const literalRatio = best.literal / best.literalBaseline;
const sessionRatio = best.session / best.sessionBaseline;
console.log(
  `${literalTarget}: route table ${best.literal.toFixed(0)} ns, hand-written ${best.literalBaseline.toFixed(0)} ns (${literalRatio.toFixed(2)}x)`,
);
console.log(
  `${sessionTarget}: route table ${best.session.toFixed(0)} ns, hand-written ${best.sessionBaseline.toFixed(0)} ns (${sessionRatio.toFixed(2)}x)`,
);
console.log(
  JSON.stringify({
    literal_route_ns: Number(best.literal.toFixed(1)),
    literal_hand_written_ns: Number(best.literalBaseline.toFixed(1)),
    literal_ratio: Number(literalRatio.toFixed(2)),
    session_route_ns: Number(best.session.toFixed(1)),
    session_hand_written_ns: Number(best.sessionBaseline.toFixed(1)),
    session_ratio: Number(sessionRatio.toFixed(2)),
  }),
);
