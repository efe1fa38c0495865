import { readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { DressageError } from '@dressage/protocol';

/**
 * `tokenizer.json` as read: the pipeline and vocabulary go to the tokenizers library as they are;
 * Dressage itself reads `model` (present in every tokenizers file) and `added_tokens`.
 */
export interface TokenizerJson {
  model?: unknown;
  added_tokens?: unknown;
}

/** `tokenizer_config.json` as read: the special tokens and the chat template Dressage reads. */
export interface TokenizerConfig {
  bos_token?: unknown;
  eos_token?: unknown;
  chat_template?: unknown;
}

/** The files of a Hugging Face model directory that tokenization needs, parsed. */
export interface ModelFiles {
  /** The directory they were read from. */
  directory: string;
  /** `tokenizer.json`: the tokenizer pipeline and vocabulary. */
  tokenizerJson: TokenizerJson;
  /** `tokenizer_config.json`: special tokens and, usually, the chat template. */
  tokenizerConfig: TokenizerConfig;
  /**
   * The model's own Jinja chat template: `chat_template.jinja` when present (the newer layout),
   * else `chat_template` of `tokenizer_config.json`. Null when the model ships none.
   */
  chatTemplate: string | null;
}

async function readJsonObject(path: string, required: boolean): Promise<object | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    if (!required && (error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw new DressageError({
      code: 'not_found',
      message: `Cannot read ${path}: a model directory needs tokenizer.json and tokenizer_config.json`,
      cause: error,
      details: { path },
    });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${path} is not valid JSON: ${(error as Error).message}`,
      cause: error,
      details: { path },
    });
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${path} must hold a JSON object`,
      details: { path },
    });
  }
  return value;
}

async function readOptionalText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw DressageError.from(error, 'unavailable');
  }
}

// Older configs may hold a list of named templates; the unnamed default is the chat one.
function templateFromConfig(config: TokenizerConfig, path: string): string | null {
  const template = config.chat_template;
  if (template === undefined || template === null) return null;
  if (typeof template === 'string') return template;
  if (Array.isArray(template)) {
    const named = template.find(
      (entry): entry is { name: string; template: string } =>
        typeof entry === 'object' &&
        entry !== null &&
        (entry as { name?: unknown }).name === 'default' &&
        typeof (entry as { template?: unknown }).template === 'string',
    );
    if (named) return named.template;
  }
  throw new DressageError({
    code: 'invalid_argument',
    message: `chat_template in ${path} must be a string or a list holding a "default" template`,
    details: { path },
  });
}

/**
 * Reads `tokenizer.json`, `tokenizer_config.json` and the chat template of a local Hugging Face
 * model directory.
 *
 * @throws DressageError `not_found` when the directory or a required file is missing,
 *   `invalid_argument` when a file is not a JSON object or the template has the wrong shape.
 */
export async function readModelFiles(directory: string): Promise<ModelFiles> {
  let isDirectory = false;
  try {
    isDirectory = (await stat(directory)).isDirectory();
  } catch (error) {
    throw new DressageError({
      code: 'not_found',
      message: `Model directory ${directory} does not exist`,
      cause: error,
      details: { path: directory },
    });
  }
  if (!isDirectory) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${directory} is not a directory: pass the model directory, not a file in it`,
      details: { path: directory },
    });
  }
  const tokenizerPath = join(directory, 'tokenizer.json');
  const configPath = join(directory, 'tokenizer_config.json');
  const [tokenizerJson, tokenizerConfig, templateFile] = await Promise.all([
    readJsonObject(tokenizerPath, true),
    readJsonObject(configPath, true),
    readOptionalText(join(directory, 'chat_template.jinja')),
  ]);
  if (!('model' in tokenizerJson!)) {
    throw new DressageError({
      code: 'invalid_argument',
      message: `${tokenizerPath} has no "model" section: it is not a tokenizers file`,
      details: { path: tokenizerPath },
    });
  }
  return {
    directory,
    tokenizerJson: tokenizerJson!,
    tokenizerConfig: tokenizerConfig!,
    chatTemplate: templateFile ?? templateFromConfig(tokenizerConfig!, configPath),
  };
}

/**
 * Reads a Jinja chat template file given to replace the model directory's (SGLang's
 * `--chat-template`).
 *
 * @throws DressageError `not_found` when the file cannot be read, `invalid_argument` when it is
 *   empty.
 */
export async function readChatTemplateFile(path: string): Promise<string> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new DressageError({
      code: 'not_found',
      message: `Cannot read the chat template ${path}: ${(error as Error).message}`,
      cause: error,
      details: { path },
    });
  }
  if (text.trim() === '') {
    throw new DressageError({
      code: 'invalid_argument',
      message: `The chat template ${path} is empty`,
      details: { path },
    });
  }
  return text;
}
