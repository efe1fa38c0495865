import { describe, expect, it } from 'vitest';
import { createProxyConfig, parseProxyArguments, usage } from './config.js';

describe('dressage-proxy flags (§1.11)', () => {
  it('applies the reference defaults', () => {
    const parsed = parseProxyArguments(['--tokenizer-path', '/m', '--store-dir', 'none'], {
      SGLANG_ROUTER_HOST: 'router',
    });
    if (parsed.help) throw new Error('unexpected help');
    expect(parsed.config).toMatchObject({
      sglangRouterUrl: 'http://router:8000',
      host: '127.0.0.1',
      port: 8800,
      maxOutputTokens: null,
      contextWindow: null,
      dynamicMaxTokens: true,
      rolloutTemperature: 1,
      apiKey: 'no-auth',
      minGroupSize: 1,
      sessionTimeoutSeconds: 3200,
      groupTimeoutSeconds: 300,
      tokenBuildMode: 'tito',
      tokenBuildModel: 'qwen3_5',
      titoModel: 'qwen3_5',
      toolCallParseBackend: 'sglang_api',
      reasoningParseBackend: 'sglang_api',
      streamHeartbeatIntervalSeconds: 15,
      storeDirectory: null,
    });
  });

  it('reads every flag and SGLANG_ROUTER_URL', () => {
    const parsed = parseProxyArguments(
      [
        '--tokenizer-path=/m',
        '--port',
        '9000',
        '--context-window',
        '4096',
        '--max-output-tokens',
        '512',
        '--no-dynamic-max-tokens',
        '--token-build-mode',
        'snapshot',
        '--dressage-partial-rollout',
        '--max-partial-rollout-preempts',
        '0',
        '--stream-heartbeat-interval-seconds',
        '0',
        '--api-key',
        'k',
        '--store-dir',
        '/tmp/s',
      ],
      { SGLANG_ROUTER_URL: 'http://r:1' },
    );
    if (parsed.help) throw new Error('unexpected help');
    expect(parsed.config).toMatchObject({
      sglangRouterUrl: 'http://r:1',
      port: 9000,
      contextWindow: 4096,
      maxOutputTokens: 512,
      dynamicMaxTokens: false,
      tokenBuildMode: 'snapshot',
      partialRollout: true,
      maxPartialRolloutPreempts: 0,
      streamHeartbeatIntervalSeconds: 0,
      apiKey: 'k',
      storeDirectory: '/tmp/s',
    });
  });

  it('collects --tool-call-hooks entries from comma-separated and repeated flags', () => {
    const parsed = parseProxyArguments([
      '--tokenizer-path',
      'm',
      '--tool-call-hooks',
      './hooks.js:snapshot, ./net.js',
      '--tool-call-hooks=@acme/sandbox-hooks',
      '--tool-call-hook-before-timeout',
      '30',
    ]);
    if (parsed.help) throw new Error('unexpected help');
    expect(parsed.config.toolCallHooks).toEqual(['./hooks.js:snapshot', './net.js', '@acme/sandbox-hooks']);
    expect(parsed.config.toolCallHookBeforeTimeoutSeconds).toBe(30);
    const plain = parseProxyArguments(['--tokenizer-path', 'm']);
    if (plain.help) throw new Error('unexpected help');
    expect(plain.config).toMatchObject({ toolCallHooks: [], toolCallHookBeforeTimeoutSeconds: null });
    expect(() =>
      parseProxyArguments(['--tokenizer-path', 'm', '--tool-call-hook-before-timeout', '0']),
    ).toThrow(/--tool-call-hook-before-timeout: must be > 0/);
  });

  it('names the bad flag', () => {
    expect(() => parseProxyArguments([])).toThrow(/--tokenizer-path/);
    expect(() => parseProxyArguments(['--tokenizer-path', 'm', '--context-window', '0'])).toThrow(
      /--context-window: must be > 0/,
    );
    expect(() => parseProxyArguments(['--tokenizer-path', 'm', '--token-build-mode', 'x'])).toThrow(
      /--token-build-mode/,
    );
    expect(() =>
      parseProxyArguments(['--tokenizer-path', 'm', '--stream-heartbeat-interval-seconds', 'inf']),
    ).toThrow(/heartbeat/);
    expect(() => parseProxyArguments(['--tokenizer-path', 'm', '--bogus'])).toThrow(/bogus/);
    expect(parseProxyArguments(['--help'])).toEqual({ help: true });
  });

  it('reads the store fsync policy (always by default)', () => {
    const defaults = parseProxyArguments(['--tokenizer-path', '/m']);
    const never = parseProxyArguments(['--tokenizer-path', '/m', '--store-fsync', 'never']);
    if (defaults.help || never.help) throw new Error('unexpected help');
    expect([defaults.config.storeFsync, never.config.storeFsync]).toEqual(['always', 'never']);
    expect(() => parseProxyArguments(['--tokenizer-path', '/m', '--store-fsync', 'sometimes'])).toThrow(
      /--store-fsync/,
    );
  });

  it('reads the engine and request-body timeouts (0 = no limit)', () => {
    const defaults = parseProxyArguments(['--tokenizer-path', '/m']);
    const set = parseProxyArguments([
      '--tokenizer-path',
      '/m',
      '--engine-request-timeout',
      '0',
      '--request-body-timeout',
      '5',
    ]);
    if (defaults.help || set.help) throw new Error('unexpected help');
    expect(defaults.config).toMatchObject({
      engineRequestTimeoutSeconds: 3600,
      requestBodyTimeoutSeconds: 60,
      maxRequestBytes: 4 * 1024 ** 2,
    });
    expect(set.config).toMatchObject({ engineRequestTimeoutSeconds: null, requestBodyTimeoutSeconds: 5 });
    expect(() => parseProxyArguments(['--tokenizer-path', '/m', '--engine-request-timeout', '-1'])).toThrow(
      /--engine-request-timeout/,
    );
  });
});

describe('one schema for every setting', () => {
  it('generates --help from the schema: every flag, its default and its variable', () => {
    for (const flag of [
      '--tokenizer-path DIR',
      '--max-request-mb MB',
      '--store-dir DIR',
      '--tito-model',
      '--api-key-file FILE',
      '--no-dynamic-max-tokens',
    ]) {
      expect(usage).toContain(flag);
    }
    expect(usage).toMatch(/--max-request-mb MB +largest request body \(413 above it\) \(default 4\)/);
    expect(usage).toMatch(/--store-dir DIR .*\(env DRESSAGE_PROXY_STORE_DIR\)/);
    expect(usage).toContain('$DRESSAGE_PROXY_MAX_STEPS_PER_SESSION');
    expect(usage).toContain('a flag beats its environment variable, which beats the default');
  });

  it('reads the environment once, at start-up: a flag beats its variable, which beats the default', () => {
    const env = { DRESSAGE_PROXY_STORE_DIR: '/from-env', DRESSAGE_PROXY_MAX_STEPS_PER_SESSION: '3' };
    const fromEnv = parseProxyArguments(['--tokenizer-path', 'm'], env);
    const fromFlag = parseProxyArguments(['--tokenizer-path', 'm', '--store-dir', '/from-flag'], env);
    if (fromEnv.help || fromFlag.help) throw new Error('unexpected help');
    expect([fromEnv.config.storeDirectory, fromFlag.config.storeDirectory]).toEqual([
      '/from-env',
      '/from-flag',
    ]);
    expect(fromEnv.config.maxStepsPerSession).toBe(3);
    expect(() =>
      parseProxyArguments(['--tokenizer-path', 'm'], { DRESSAGE_PROXY_MAX_STEPS_PER_SESSION: 'many' }),
    ).toThrow(/DRESSAGE_PROXY_MAX_STEPS_PER_SESSION: expected a number/);
  });

  it('checks settings given in code against the same schema', () => {
    expect(createProxyConfig({ tokenizerPath: 'm' })).toMatchObject({
      port: 8800,
      maxStepsPerSession: 0,
      modelMaskType: 'qwen3_5',
      titoModel: 'qwen3_5',
    });
    expect(createProxyConfig({ tokenizerPath: 'm', tokenBuildModel: 'qwen3' }).titoModel).toBe('qwen3');
    expect(() => createProxyConfig({ tokenizerPath: 'm', port: -1 })).toThrow(/port: must be >= 0/);
    expect(() => createProxyConfig({ tokenizerPath: 'm', contextWindow: 0 })).toThrow(/contextWindow/);
  });
});
