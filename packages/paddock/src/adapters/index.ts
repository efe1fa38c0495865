import type { z } from 'zod';
import type { AdapterFactory } from '../blackbox/adapter.js';
import { ClaudeCodeAdapter, claudeCodeOptionsSchema } from './claude-code.js';
import { CodexAdapter, codexOptionsSchema } from './codex.js';
import { OpenclawAdapter, openclawOptionsSchema } from './openclaw.js';
import { OpencodeAdapter, opencodeOptionsSchema } from './opencode.js';
import { QwenCodeAdapter, qwenCodeOptionsSchema } from './qwen-code.js';

/** The adapters `dressage-blackbox-server` ships with, by `blackbox_type`. */
export const builtinAdapters: Record<string, AdapterFactory> = {
  opencode: (options) => new OpencodeAdapter(options),
  qwen_code: (options) => new QwenCodeAdapter(options),
  claude_code: (options) => new ClaudeCodeAdapter(options),
  codex: (options) => new CodexAdapter(options),
  openclaw: (options) => new OpenclawAdapter(options),
};

/**
 * Each built-in adapter's `backend_options` schema (strict, without `proxy`), by `blackbox_type`:
 * what its register call checks, for checking the options before any sandbox starts.
 */
export const builtinAdapterOptionsSchemas = {
  opencode: opencodeOptionsSchema,
  qwen_code: qwenCodeOptionsSchema,
  claude_code: claudeCodeOptionsSchema,
  codex: codexOptionsSchema,
  openclaw: openclawOptionsSchema,
} satisfies Record<string, z.ZodType>;

/**
 * The environment variable through which each built-in adapter finds its CLI's executable (else the
 * CLI's name on PATH), by `blackbox_type`.
 */
export const builtinAdapterExecutableVariables = {
  opencode: 'DRESSAGE_OPENCODE_BIN',
  qwen_code: 'DRESSAGE_QWEN_CODE_BIN',
  claude_code: 'DRESSAGE_CLAUDE_CODE_BIN',
  codex: 'DRESSAGE_CODEX_BIN',
  openclaw: 'DRESSAGE_OPENCLAW_BIN',
} as const;

export {
  ClaudeCodeAdapter,
  claudeCodeOptionsSchema,
  claudeFailure,
} from './claude-code.js';
export { CodexAdapter, codexConfig, codexFailure, codexOptionsSchema } from './codex.js';
export { codexItemsToChat } from './codex-items.js';
export {
  OpenclawAdapter,
  openclawConfig,
  openclawFailure,
  openclawOptionsSchema,
  openclawResult,
} from './openclaw.js';
export { OpencodeAdapter, type OpencodeConfig, opencodeOptionsSchema } from './opencode.js';
export { opencodeMessagesToChat } from './opencode-messages.js';
export { QwenCodeAdapter, qwenCodeOptionsSchema } from './qwen-code.js';
export { streamJsonResult, streamJsonToChat } from './stream-json.js';
