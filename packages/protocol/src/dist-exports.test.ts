import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const packageDirectory = dirname(dirname(fileURLToPath(import.meta.url)));
const run = promisify(execFile);

// Runs an ES module in a plain Node process inside the package directory, so `@dressage/protocol`
// resolves through package.json "exports" (self-reference) to the built dist, as a consumer sees it.
async function runModule(source: string): Promise<string> {
  const { stdout } = await run(process.execPath, ['--input-type=module', '-e', source], {
    cwd: packageDirectory,
  });
  return stdout.trim();
}

describe('built package exports', () => {
  it('has been built', () => {
    expect(existsSync(join(packageDirectory, 'dist', 'index.js'))).toBe(true);
    expect(existsSync(join(packageDirectory, 'dist', 'index.d.ts'))).toBe(true);
  });

  it('imports the public entry point from dist and exercises it', async () => {
    const output = await runModule(`
      import * as protocol from '@dressage/protocol';
      import { packTypedArray, unpackTypedArray } from '@dressage/protocol/internal';
      const resolved = import.meta.resolve('@dressage/protocol');
      const ids = unpackTypedArray(packTypedArray(new Int32Array([9707, 1879])), 'int32');
      if ('packTypedArray' in protocol) throw new Error('the main entry still exports a building block');
      const error = new protocol.DressageError({ message: 'm', code: 'not_found' });
      const request = protocol.chatCompletionRequestSchema.parse({ messages: [{ role: 'user', content: 'hi' }] });
      const chunk = protocol.TrainChunk.encode({ payload: { $case: 'header', value: { batch_id: 'b', rollout_id: 1,
        sample_count: 0, token_count: 0, global_batch_size: 1, expected_weight_version: '' } } }).finish();
      console.log(JSON.stringify({
        resolved, ids: Array.from(ids), httpStatus: error.httpStatus, messages: request.messages.length,
        chunkBytes: chunk.length, service: protocol.TRAINER_SERVICE_NAME,
      }));
    `);
    const result = JSON.parse(output);
    expect(result.resolved).toMatch(/\/dist\/index\.js$/);
    expect(result.ids).toEqual([9707, 1879]);
    expect(result.httpStatus).toBe(404);
    expect(result.messages).toBe(1);
    expect(result.chunkBytes).toBeGreaterThan(0);
    expect(result.service).toBe('dressage.trainer.v1.TrainerService');
  });

  it('exports the proto file and package.json, and nothing internal', async () => {
    const output = await runModule(`
      const proto = import.meta.resolve('@dressage/protocol/trainer.proto');
      const manifest = import.meta.resolve('@dressage/protocol/package.json');
      let internal = 'resolved';
      try { import.meta.resolve('@dressage/protocol/src/errors.ts'); } catch (error) { internal = error.code; }
      console.log(JSON.stringify({ proto, manifest, internal }));
    `);
    const result = JSON.parse(output);
    expect(existsSync(fileURLToPath(result.proto))).toBe(true);
    expect(result.proto).toMatch(/trainer\.proto$/);
    expect(result.manifest).toMatch(/package\.json$/);
    expect(result.internal).toBe('ERR_PACKAGE_PATH_NOT_EXPORTED');
  });

  it('serves the HTTP layer from dist under ./http, sharing the error class of the main entry', async () => {
    const output = await runModule(`
      import { DressageError } from '@dressage/protocol';
      import * as http from '@dressage/protocol/http';
      const resolved = import.meta.resolve('@dressage/protocol/http');
      const routes = new http.RouteTable().add('POST', '/s/{session}/v1/chat/completions', 'chat');
      const found = routes.lookup('POST', http.requestPath('/s/a%3Ab/v1/chat/completions/?x'));
      const error = new http.HttpError({ status: 413, message: 'too large' });
      console.log(JSON.stringify({
        resolved, found, isDressageError: error instanceof DressageError, status: http.httpStatusOf(error),
      }));
    `);
    const result = JSON.parse(output);
    expect(result.resolved).toMatch(/\/dist\/http\.js$/);
    expect(result.found).toEqual({ kind: 'found', handler: 'chat', parameters: { session: 'a:b' } });
    expect(result.isDressageError).toBe(true);
    expect(result.status).toBe(413);
  });
});
