// The workload's synthetic text, shared by the benchmark's agents and its floor forwarder.
export const words = [
  'config',
  'session',
  'value',
  'handler',
  'request',
  'result',
  'parse',
  'token',
  'buffer',
  'error',
  'index',
  'render',
  'store',
  'client',
  'server',
  'update',
  'stream',
  'record',
  'schema',
  'option',
];

// A few KB of shell output: source lines, test logs and paths, like a coding agent's tool results.
export function toolOutput(next: () => number, bytes: number): string {
  const lines: string[] = [];
  let length = 0;
  while (length < bytes) {
    const a = words[Math.floor(next() * words.length)]!;
    const b = words[Math.floor(next() * words.length)]!;
    const n = Math.floor(next() * 900) + 10;
    const kind = next();
    const line =
      kind < 0.4
        ? `src/${a}/${b}-${n % 37}.ts:${n}:  const ${a}${b[0]!.toUpperCase()}${b.slice(1)} = await ${b}.${a}(input, { limit: ${n} });`
        : kind < 0.7
          ? `  ${next() < 0.9 ? '✓' : '✗'} ${a} ${b} keeps the ${words[n % words.length]} when the ${a} changes (${n} ms)`
          : `${' '.repeat(Math.floor(next() * 8))}if (${a}.${b} === undefined) throw new ${a[0]!.toUpperCase()}${a.slice(1)}Error('${b} missing at ${n}');`;
    lines.push(line);
    length += line.length + 1;
  }
  return lines.join('\n');
}
