// The three sandbox tools of a whitebox agent (`shell.exec`, `file.read`, `file.write`).
import { DressageError, parseWire } from '@dressage/protocol';
import type { CommandResult, SandboxLease, SandboxProvider } from '@dressage/sandbox';
import { shellJoin } from '@dressage/sandbox/internal';
import { z } from 'zod';

// The arguments of the three sandbox tools, as the reference's paddock takes them.
const shellExecArgs = z.looseObject({
  cmd: z.union([z.string(), z.array(z.string())]).optional(),
  command: z.union([z.string(), z.array(z.string())]).optional(),
  cwd: z.string().optional(),
  env: z.record(z.string(), z.string()).optional(),
  timeout: z.number().positive().optional(),
  stdin: z.string().optional(),
});
const encoding = z
  .string()
  .refine((name): name is BufferEncoding => Buffer.isEncoding(name), 'is not an encoding Node knows')
  .optional();
const fileReadArgs = z.looseObject({
  path: z.string().min(1),
  max_bytes: z.int().nonnegative().optional(),
  encoding,
});
const fileWriteArgs = z.looseObject({
  path: z.string().min(1),
  content: z.string().optional(),
  append: z.boolean().optional(),
  encoding,
});

/**
 * The three sandbox tools of a whitebox agent: `shell.exec`, `file.read` and `file.write`. Each call
 * returns the text the model sees and metadata for logs.
 */
export class WhiteboxToolPaddock {
  readonly #provider: SandboxProvider;
  readonly #lease: SandboxLease;

  constructor(provider: SandboxProvider, lease: SandboxLease) {
    this.#provider = provider;
    this.#lease = lease;
  }

  /**
   * Runs `toolId` with `args` (checked against the tool's arguments; a bad one is an
   * `invalid_argument` error naming the field) and returns the text the model sees and metadata.
   */
  async toolCall(toolId: string, args: Record<string, unknown>): Promise<[string, Record<string, unknown>]> {
    if (toolId === 'shell.exec') {
      const parsed = parseWire(shellExecArgs, args, 'shell.exec arguments');
      const command = parsed.cmd ?? parsed.command;
      if (command === undefined)
        throw new DressageError({ code: 'invalid_argument', message: 'shell.exec needs cmd or command' });
      const line = Array.isArray(command) ? shellJoin(command) : command;
      const result: CommandResult = await this.#provider.runCommand(this.#lease, line, {
        cwd: parsed.cwd,
        env: parsed.env,
        timeoutSeconds: parsed.timeout,
        stdin: parsed.stdin,
      });
      return [result.stdout !== '' ? result.stdout : result.stderr, { ...result }];
    }
    if (toolId === 'file.read') {
      const {
        path,
        max_bytes: maxBytes,
        encoding = 'utf-8',
      } = parseWire(fileReadArgs, args, 'file.read arguments');
      const bytes = await this.#provider.readFile(this.#lease, path);
      const limited = maxBytes === undefined ? bytes : bytes.subarray(0, maxBytes);
      const text = limited.toString(encoding);
      return [text, { path, chars: text.length, bytes: limited.length, encoding }];
    }
    if (toolId === 'file.write') {
      const parsed = parseWire(fileWriteArgs, args, 'file.write arguments');
      const content = parsed.content ?? '';
      const append = parsed.append === true;
      await this.#provider.writeFile(this.#lease, parsed.path, content, { append });
      return ['', { path: parsed.path, chars: content.length, encoding: parsed.encoding ?? 'utf-8', append }];
    }
    throw new DressageError({ code: 'not_found', message: `unknown whitebox tool ${toolId}` });
  }
}
