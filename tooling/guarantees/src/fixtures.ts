import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer } from '@dressage/tito';
import { EngineStub } from './engine-stub.js';
import { qwenModelDirectory } from './proxy-process.js';

/** A fresh directory under the system temp dir and its remover. */
export function temporaryDirectory(prefix = 'dressage-guarantees-'): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

/** An engine stub answering "ok" and end-of-turn in real Qwen3 ids. */
export async function startQwenEngineStub(): Promise<EngineStub> {
  const tokenizer = await loadTokenizer(qwenModelDirectory);
  return new EngineStub(Array.from(tokenizer.encode('ok<|im_end|>'))).start();
}

/** One user turn, then finalize: the two calls every recorded trajectory takes. */
export function chatBody(content: string): Record<string, unknown> {
  return { model: 'policy', messages: [{ role: 'user', content }] };
}
