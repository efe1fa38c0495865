import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { safeParseWire, type ValidationIssue } from '../validation.js';
import { promptLine } from './__fixtures__/payloads.js';
import { createPromptRecordSchema, promptRecordSchema } from './prompt.js';

function paths(value: unknown, schema: z.ZodType = promptRecordSchema): string[] {
  const result = safeParseWire(schema, value);
  return result.success ? [] : (result.error.details.issues as ValidationIssue[]).map((issue) => issue.path);
}

describe('prompt JSONL record', () => {
  it('accepts the documented line and keeps unknown top-level and metadata keys', () => {
    const parsed = promptRecordSchema.parse({
      ...promptLine,
      metadata: { ...promptLine.metadata, custom: 1 },
    });
    expect(parsed.metadata?.instance_id).toBe('inst-001');
    expect(parsed.metadata?.blackbox_execute_cmds?.before_agent?.[0]?.required).toBe(true);
    expect((parsed as Record<string, unknown>).difficulty).toBe('easy');
    expect((parsed.metadata as Record<string, unknown>).custom).toBe(1);
  });

  it('accepts chat messages as the prompt and any JSON value as the label', () => {
    const parsed = promptRecordSchema.parse({
      prompt: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: 'q' },
      ],
      label: { answer: 42 },
    });
    expect(Array.isArray(parsed.prompt)).toBe(true);
    expect(parsed.label).toEqual({ answer: 42 });
    expect(promptRecordSchema.parse({ prompt: 'p', label: 7 }).label).toBe(7);
  });

  it('names the bad field of malformed lines', () => {
    expect(paths({ label: 'x' })).toEqual(['prompt']);
    expect(paths({ prompt: '' })).toEqual(['prompt']);
    expect(paths({ prompt: [] })).toEqual(['prompt']);
    expect(
      paths({
        prompt: [
          { role: 'user', content: 'q' },
          { role: 'wizard', content: 'x' },
        ],
      }),
    ).toEqual(['prompt[1].role']);
    expect(paths({ prompt: 'p', metadata: { instance_id: 5 } })).toEqual(['metadata.instance_id']);
    expect(paths({ prompt: 'p', metadata: 'not an object' })).toEqual(['metadata']);
  });

  it('rejects unknown execute-command stages and keys', () => {
    expect(paths({ prompt: 'p', metadata: { blackbox_execute_cmds: { during_agent: [] } } })).toEqual([
      'metadata.blackbox_execute_cmds',
    ]);
    expect(
      paths({
        prompt: 'p',
        metadata: { blackbox_execute_cmds: { before_agent: [{ name: 'a', cmd: 'ls', retries: 3 }] } },
      }),
    ).toEqual(['metadata.blackbox_execute_cmds.before_agent[0]']);
    expect(
      paths({
        prompt: 'p',
        metadata: { blackbox_execute_cmds: { after_agent: [{ name: 'a', cmd: 'ls', timeout: 0 }] } },
      }),
    ).toEqual(['metadata.blackbox_execute_cmds.after_agent[0].timeout']);
  });

  it('builds schemas for files with other key names', () => {
    const schema = createPromptRecordSchema({
      inputKey: 'question',
      labelKey: 'answer',
      metadataKey: 'meta',
    });
    const parsed = schema.parse({ question: 'q?', answer: 'a', meta: { reward_fn: 'exact_match' } });
    expect(parsed.question).toBe('q?');
    expect(paths({ prompt: 'p' }, schema)).toEqual(['question']);
  });
});
