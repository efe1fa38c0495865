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
// `--only a,b` limits the run to some package folders (for local iteration; CI runs all of them).
const onlyIndex = process.argv.indexOf('--only');
const only = onlyIndex >= 0 ? new Set(process.argv[onlyIndex + 1]?.split(',')) : null;

const packages = readdirSync(join(root, 'packages'), { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && existsSync(join(root, 'packages', entry.name, 'package.json')))
  .map((entry) => {
    const directory = join(root, 'packages', entry.name);
    const manifest = JSON.parse(readFileSync(join(directory, 'package.json'), 'utf8'));
    return { directory, folder: entry.name, manifest };
  })
  .filter(({ folder, manifest }) => manifest.private !== true && (only === null || only.has(folder)));

const missing = packages.filter(({ folder }) => !existsSync(join(here, 'checks', `${folder}.mjs`)));
if (missing.length > 0) {
  console.error(
    `consumer test: no check script for ${missing.map(({ folder }) => `checks/${folder}.mjs`).join(', ')}`,
  );
  process.exit(1);
}

const workspace = mkdtempSync(join(tmpdir(), 'dressage-consumer-'));
const tarballs = join(workspace, 'tarballs');
const project = join(workspace, 'project');
mkdirSync(tarballs);
mkdirSync(project);
let failed = 0;
try {
  for (const { directory, manifest } of packages) {
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
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--loglevel=error', ...files], {
    cwd: project,
    stdio: 'inherit',
  });
  cpSync(join(here, 'checks'), join(project, 'checks'), { recursive: true });
  for (const { folder, manifest } of packages) {
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
  console.error(`consumer test: ${failed} of ${packages.length} packages failed`);
  process.exit(1);
}
console.log(`consumer test: ${packages.length} packages installed from tarballs and exercised`);
