import { describe, expect, it } from 'vitest';
import { openclawConfig, openclawFailure, openclawOptionsSchema, openclawResult } from './openclaw.js';

describe('openclaw adapter', () => {
  const context = {
    proxyOrigin: 'http://127.0.0.1:9',
    apiPath: '/v1',
    proxyApiKey: 'k',
    workDir: '/workspace',
  };

  it('runs host exec without prompts only inside a sandbox, against the LLM proxy only', () => {
    const options = openclawOptionsSchema.parse({});
    const inside = openclawConfig(options, { ...context, insideSandbox: true });
    expect(inside).toMatchObject({
      tools: { exec: { mode: 'full' } },
      update: { checkOnStart: false },
      agents: {
        defaults: { workspace: '/workspace', skipBootstrap: true, model: { primary: 'sglang/proxy-model' } },
      },
      models: {
        providers: { sglang: { baseUrl: 'http://127.0.0.1:9/v1', apiKey: 'k', api: 'openai-completions' } },
      },
    });
    expect(openclawConfig(options, { ...context, insideSandbox: false })).toMatchObject({
      tools: { exec: { mode: 'deny' } },
    });
  });

  it('reads the final reply and the failure of a --json run', () => {
    expect(openclawResult('log line\n{"ok":true,"status":"ok","final":"Done."}')).toEqual({
      text: 'Done.',
      error: null,
    });
    expect(openclawResult('{"payloads":[{"text":"a"},{"text":"b"}]}')).toEqual({ text: 'a\nb', error: null });
    expect(
      openclawResult('{"ok":false,"status":"error","error":{"message":"Turn exceeded max_steps."}}'),
    ).toEqual({
      text: null,
      error: 'Turn exceeded max_steps.',
    });
  });

  it('maps its failure messages onto the turn error table', () => {
    expect(openclawFailure('Turn exceeded max_steps.')).toMatchObject({ httpStatus: 429 });
    expect(openclawFailure('context window exceeded')).toMatchObject({ httpStatus: 413 });
    expect(openclawFailure('agent timed out')).toMatchObject({ httpStatus: 504 });
    expect(openclawFailure('connection refused')).toMatchObject({ httpStatus: 502 });
  });
});
