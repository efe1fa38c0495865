import { z } from 'zod';
import { chatMessageSchema, toolSchema } from './chat.js';
import { jsonObjectSchema } from './common.js';

/** One command run in the agent's sandbox before or after the agent. */
export const executeCommandSchema = z.strictObject({
  name: z.string().min(1),
  cmd: z.string().min(1),
  required: z.boolean().optional(),
  timeout: z.number().positive().optional(),
  stdout_limit: z.int().positive().optional(),
});

/** One command run in the agent's sandbox before or after the agent. */
export type ExecuteCommand = z.infer<typeof executeCommandSchema>;

/** `metadata.blackbox_execute_cmds`: commands per stage. Unknown stages and keys are rejected. */
export const blackboxExecuteCommandsSchema = z.strictObject({
  before_agent: z.array(executeCommandSchema).optional(),
  after_agent: z.array(executeCommandSchema).optional(),
});

/** The keys Dressage reads from a prompt's metadata; any other key is kept as is. */
export const promptMetadataSchema = z.looseObject({
  instance_id: z.string().min(1).optional(),
  reward_fn: z.string().min(1).optional(),
  blackbox_type: z.string().min(1).optional(),
  blackbox_execute_cmds: blackboxExecuteCommandsSchema.optional(),
  sandbox_image: z.string().optional(),
  sandbox_timeout_sec: z.number().positive().optional(),
  sandbox_cmd: z.string().optional(),
  sandbox_extra_params: jsonObjectSchema.optional(),
  env_type: z.string().optional(),
  env_args: jsonObjectSchema.optional(),
  agent_mode: z.string().optional(),
  agent_id: z.string().optional(),
  tool_set: z.union([z.string(), z.array(z.string())]).optional(),
  tools: z.array(toolSchema).optional(),
  generate_function_path: z.string().min(1).optional(),
  constant_reward: z.number().optional(),
  raw_reward: z.number().optional(),
});

/** The metadata of a prompt. */
export type PromptMetadata = z.infer<typeof promptMetadataSchema>;

/** A prompt: plain text, or chat messages. */
export const promptSchema = z.union([z.string().min(1), z.array(chatMessageSchema).min(1)]);

/**
 * One line of a JSONL prompt file, with the default keys (`prompt`, `label`, `metadata`). The label
 * may be any JSON value (it is stringified when read); other top-level keys are kept and later
 * copied into metadata by the data source.
 */
export const promptRecordSchema = z.looseObject({
  prompt: promptSchema,
  label: z.unknown().optional(),
  metadata: promptMetadataSchema.optional(),
});

/** One line of a JSONL prompt file. */
export type PromptRecord = z.infer<typeof promptRecordSchema>;

/** Key names of a prompt file whose records use other keys than the defaults. */
export interface PromptKeys {
  /** Default `prompt`. */
  inputKey?: string;
  /** Default `label`. */
  labelKey?: string;
  /** Default `metadata`. */
  metadataKey?: string;
}

/** A prompt-record schema for files whose prompt/label/metadata live under other keys. */
export function createPromptRecordSchema(keys: PromptKeys = {}) {
  const { inputKey = 'prompt', labelKey = 'label', metadataKey = 'metadata' } = keys;
  return z.looseObject({
    [inputKey]: promptSchema,
    [labelKey]: z.unknown().optional(),
    [metadataKey]: promptMetadataSchema.optional(),
  });
}
