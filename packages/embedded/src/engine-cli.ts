import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DressageError } from '@dressage/protocol';
import { loadTokenizer, type TitoTokenizer } from '@dressage/tito';
import { type BackendPreference, initializeBackend } from './backend.js';
import { loadModel, saveCheckpoint } from './checkpoint.js';
import { InferenceEngine } from './engine.js';
import { CausalLanguageModel } from './model.js';
import { type EngineServer, startEngineServer } from './server.js';
import { buildVocabulary } from './vocabulary.js';

const usage = `Usage:
  dressage-engine init --tokenizer DIR --output DIR [--text TEXT]... [--text-file FILE]...
                       [--layers N] [--model-dimension N] [--heads N] [--feed-forward N]
                       [--context-length N] [--seed N] [--weight-version V]
      Creates a seeded model whose vocabulary is the ids of the texts plus the added tokens,
      and saves it (with the tokenizer files) as a checkpoint directory.
  dressage-engine serve --model DIR [--tokenizer DIR] [--host 127.0.0.1] [--port 30000]
                        [--backend auto|wasm|cpu] [--max-batch-size 32] [--seed N]
                        [--model-name NAME] [--weight-version V] [--eos-token-id ID]...
                        [--exit-with-stdin]
      Serves a checkpoint through the SGLang HTTP subset (/generate, /abort_request, ...).
      --exit-with-stdin: exit when standard input ends (for a parent that starts the engine).`;

/** What the CLI prints to; tests pass their own. */
export interface CliIo {
  log: (line: string) => void;
  error: (line: string) => void;
}

function integer(value: string | undefined, name: string): number | undefined {
  if (value === undefined) return undefined;
  const parsed = Number(value);
  if (!Number.isInteger(parsed)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `--${name} must be an integer, got ${value}`,
    });
  }
  return parsed;
}

function required(value: string | undefined, name: string): string {
  if (value === undefined || value === '') {
    throw new DressageError({ code: 'invalid_argument', message: `--${name} is required\n\n${usage}` });
  }
  return value;
}

async function hasTokenizer(directory: string): Promise<boolean> {
  return stat(join(directory, 'tokenizer.json')).then(
    (info) => info.isFile(),
    () => false,
  );
}

/** The ids that end a generation by default: the tokenizer's eos token and `<|endoftext|>`. */
export function defaultEosTokenIds(tokenizer: TitoTokenizer): number[] {
  const ids = new Set<number>();
  if (tokenizer.eosToken !== null) {
    const id = tokenizer.tokenId(tokenizer.eosToken);
    if (id !== undefined) ids.add(id);
  }
  const endOfText = tokenizer.tokenId('<|endoftext|>');
  if (endOfText !== undefined) ids.add(endOfText);
  return [...ids];
}

async function initCommand(args: string[], io: CliIo): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      tokenizer: { type: 'string' },
      output: { type: 'string' },
      text: { type: 'string', multiple: true },
      'text-file': { type: 'string', multiple: true },
      layers: { type: 'string' },
      'model-dimension': { type: 'string' },
      heads: { type: 'string' },
      'feed-forward': { type: 'string' },
      'context-length': { type: 'string' },
      seed: { type: 'string' },
      'weight-version': { type: 'string' },
      backend: { type: 'string' },
    },
  });
  const tokenizerDirectory = required(values.tokenizer, 'tokenizer');
  const output = required(values.output, 'output');
  await initializeBackend({ backend: (values.backend ?? 'auto') as BackendPreference });
  const tokenizer = await loadTokenizer(tokenizerDirectory);
  const texts = [...(values.text ?? [])];
  for (const file of values['text-file'] ?? []) texts.push(await readFile(file, 'utf8'));
  const vocabulary = buildVocabulary({ tokenizer, texts, addedTokensOf: tokenizer });
  const config = Object.fromEntries(
    Object.entries({
      layerCount: integer(values.layers, 'layers'),
      modelDimension: integer(values['model-dimension'], 'model-dimension'),
      headCount: integer(values.heads, 'heads'),
      feedForwardDimension: integer(values['feed-forward'], 'feed-forward'),
      contextLength: integer(values['context-length'], 'context-length'),
      seed: integer(values.seed, 'seed'),
    }).filter(([, value]) => value !== undefined),
  );
  const model = CausalLanguageModel.create(vocabulary, config);
  await saveCheckpoint(output, model, {
    weightVersion: values['weight-version'] ?? 'default',
    tokenizerDirectory,
  });
  io.log(
    `Saved a ${model.parameterCount}-parameter model with ${vocabulary.outputCount} known token ids to ${output}`,
  );
  model.dispose();
}

async function serveCommand(args: string[], io: CliIo): Promise<EngineServer> {
  const { values } = parseArgs({
    args,
    options: {
      model: { type: 'string' },
      tokenizer: { type: 'string' },
      host: { type: 'string' },
      port: { type: 'string' },
      backend: { type: 'string' },
      'max-batch-size': { type: 'string' },
      seed: { type: 'string' },
      'model-name': { type: 'string' },
      'weight-version': { type: 'string' },
      'eos-token-id': { type: 'string', multiple: true },
    },
  });
  const modelDirectory = required(values.model, 'model');
  const backend = values.backend ?? 'auto';
  if (!['auto', 'wasm', 'cpu'].includes(backend)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `--backend must be auto, wasm or cpu, got ${backend}`,
    });
  }
  await initializeBackend({ backend: backend as BackendPreference, log: io.error });
  const tokenizerDirectory =
    values.tokenizer ?? ((await hasTokenizer(modelDirectory)) ? modelDirectory : undefined);
  const tokenizer = tokenizerDirectory === undefined ? undefined : await loadTokenizer(tokenizerDirectory);
  const { model, weightVersion } = await loadModel(modelDirectory);
  const eosTokenIds =
    values['eos-token-id'] !== undefined
      ? values['eos-token-id'].map((value) => integer(value, 'eos-token-id')!)
      : tokenizer !== undefined
        ? defaultEosTokenIds(tokenizer)
        : [];
  const engine = new InferenceEngine({
    model,
    weightVersion: values['weight-version'] ?? weightVersion,
    maxBatchSize: integer(values['max-batch-size'], 'max-batch-size') ?? 32,
    seed: integer(values.seed, 'seed') ?? 0,
    eosTokenIds,
    ...(tokenizer === undefined ? {} : { decodeText: (ids: readonly number[]) => tokenizer.decode(ids) }),
  });
  const server = await startEngineServer({
    engine,
    ...(tokenizer === undefined ? {} : { tokenizer }),
    modelName: values['model-name'] ?? 'dressage-embedded',
    host: values.host ?? '127.0.0.1',
    port: integer(values.port, 'port') ?? 30000,
  });
  io.error(
    `dressage-engine: ${model.parameterCount} parameters, ${model.vocabulary.outputCount} known ids, ` +
      `context ${model.config.contextLength}, weight version ${engine.weightVersion}`,
  );
  io.log(`dressage-engine listening on ${server.url}`);
  return server;
}

/**
 * Runs the `dressage-engine` command line. `serve` resolves with the running server; `init`
 * resolves once the checkpoint is written.
 */
export async function runEngineCli(argv: string[], io: CliIo): Promise<EngineServer | null> {
  const [command, ...rest] = argv;
  if (rest.includes('--help') || rest.includes('-h')) {
    io.log(usage);
    return null;
  }
  try {
    return await runCommand(command, rest, io);
  } catch (error) {
    // node:util's parse errors (an unknown flag, a missing value) become usage errors naming it.
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS'))
      throw new DressageError({
        code: 'invalid_argument',
        message: `${(error as Error).message}\n\n${usage}`,
      });
    throw error;
  }
}

async function runCommand(
  command: string | undefined,
  rest: string[],
  io: CliIo,
): Promise<EngineServer | null> {
  if (command === 'init') {
    await initCommand(rest, io);
    return null;
  }
  if (command === 'serve') return serveCommand(rest, io);
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    io.log(usage);
    return null;
  }
  throw new DressageError({ code: 'invalid_argument', message: `Unknown command ${command}\n\n${usage}` });
}
