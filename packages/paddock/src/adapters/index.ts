import type { AdapterFactory } from '../blackbox/adapter.js';
import { ClaudeCodeAdapter } from './claude-code.js';
import { CodexAdapter } from './codex.js';
import { OpenclawAdapter } from './openclaw.js';
import { OpencodeAdapter } from './opencode.js';
import { QwenCodeAdapter } from './qwen-code.js';

/** The adapters `dressage-blackbox-server` ships with, by `blackbox_type`. */
export const builtinAdapters: Record<string, AdapterFactory> = {
  opencode: (options) => new OpencodeAdapter(options),
  qwen_code: (options) => new QwenCodeAdapter(options),
  claude_code: (options) => new ClaudeCodeAdapter(options),
  codex: (options) => new CodexAdapter(options),
  openclaw: (options) => new OpenclawAdapter(options),
};

export {
  ClaudeCodeAdapter,
  claudeCodeOptionsSchema,
  claudeFailure,
  claudeResultEvent,
} from './claude-code.js';
export { CodexAdapter, codexConfig, codexEventsToChat, codexFailure, codexOptionsSchema } from './codex.js';
export {
  OpenclawAdapter,
  openclawConfig,
  openclawFailure,
  openclawOptionsSchema,
  openclawResult,
} from './openclaw.js';
export { OpencodeAdapter, opencodeMessagesToChat, opencodeOptionsSchema } from './opencode.js';
export { QwenCodeAdapter, qwenCodeOptionsSchema, qwenStreamToChat } from './qwen-code.js';
