import { appendFileSync } from 'node:fs';
import { EngineStub } from '@dressage/guarantees/engine-stub';
import { qwenModelDirectory } from '@dressage/guarantees/proxy-process';
import { loadTokenizer } from '@dressage/tito';

/** What the model was asked for, judged from the rendered prompt. */
export type ReplyKind = 'tool_call' | 'final' | 'side';

/** One `/generate` answered: the exact ids and logprobs the engine sent back. */
export interface EngineReply {
  kind: ReplyKind;
  ids: number[];
  logprobs: number[];
  /** Prompt length in tokens. */
  promptTokens: number;
  /** Tool names offered in the prompt. */
  tools: string[];
  /** Tokens of the system message (the CLI's system prompt with its tool block). */
  systemTokens: number;
}

/** Shell-like tools of the CLIs, in order of preference. */
const shellTools = ['bash', 'Bash', 'run_shell_command', 'shell', 'exec_command', 'exec', 'shell_command'];

/** A task line the model acts on: `Create <file> in the current directory containing <word>.` */
const taskPattern = /Create (\S+) in the current directory containing (\S+?)\./;

type Json = Record<string, unknown>;

/** JSON as Python's `json.dumps` writes it (`", "` and `": "`): how Qwen3's template renders a tool call. */
export function pythonJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  if (value !== null && typeof value === 'object')
    return `{${Object.entries(value)
      .map(([key, item]) => `${JSON.stringify(key)}: ${pythonJson(item)}`)
      .join(', ')}}`;
  return JSON.stringify(value);
}

/** The tools of a rendered Qwen3 prompt (`<tools>` block, one JSON object a line). */
export function toolsOf(prompt: string): Json[] {
  const block = /<tools>\n([\s\S]*?)\n<\/tools>/.exec(prompt);
  if (!block) return [];
  return (block[1] as string)
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Json)
    .map((tool) => (tool.function ?? tool) as Json);
}

/** Arguments for a shell tool that runs `command`, shaped by its JSON schema. */
function shellArguments(tool: Json, command: string): Json {
  const parameters = (tool.parameters ?? {}) as Json;
  const properties = (parameters.properties ?? {}) as Record<string, Json>;
  const required = (parameters.required ?? []) as string[];
  const args: Json = {};
  const commandKey = ['command', 'cmd'].find((key) => key in properties) ?? 'command';
  args[commandKey] = properties[commandKey]?.type === 'array' ? ['bash', '-lc', command] : command;
  if ('description' in properties && required.includes('description')) args.description = 'write the file';
  return args;
}

/**
 * The model behind the engine stub: it reads the prompt the proxy rendered (the real Qwen3 template)
 * and answers in real Qwen3 token ids. A user task makes it call the CLI's own shell tool in Qwen3's
 * tool-call format; a tool result makes it answer briefly; a request without tools (a CLI's side
 * request, such as a title) gets a short title. Every reply is kept with its exact ids and logprobs.
 */
export class QwenAgentModel {
  readonly replies: EngineReply[] = [];
  /** Replace to script a failure (a crash, a hang) for one request. */
  override: ((prompt: string, index: number) => { ids?: number[]; hang?: boolean } | null) | null = null;
  private constructor(
    readonly engine: EngineStub,
    private readonly encode: (text: string) => number[],
    private readonly decode: (ids: number[]) => string,
  ) {}

  static async start(): Promise<QwenAgentModel> {
    const tokenizer = await loadTokenizer(qwenModelDirectory);
    const encode = (text: string) => Array.from(tokenizer.encode(text));
    const decode = (ids: number[]) => tokenizer.decode(ids);
    const model = new QwenAgentModel(await new EngineStub([]).start(), encode, decode);
    model.engine.reply = (body) => model.answer(body.input_ids);
    return model;
  }

  get url(): string {
    return this.engine.url;
  }

  close(): Promise<void> {
    return this.engine.close();
  }

  /** Replies of the task itself (tool calls and final answers), without side requests. */
  get taskReplies(): EngineReply[] {
    return this.replies.filter((reply) => reply.kind !== 'side');
  }

  private answer(inputIds: number[]): { ids: number[]; text?: string; logprobs?: number[]; hang?: boolean } {
    const prompt = this.decode(inputIds);
    if (process.env.AGENT_E2E_DUMP) appendFileSync(process.env.AGENT_E2E_DUMP, `\n=====REQUEST\n${prompt}`);
    const scripted = this.override?.(prompt, this.replies.length) ?? null;
    if (scripted?.hang) return { ids: [], hang: true };
    const tools = toolsOf(prompt);
    // What came since the model's last reply (or since the system prompt): a CLI may split one
    // turn into several user messages (the task, then reminders), or follow tool results with one.
    const generation = prompt.lastIndexOf('<|im_start|>assistant\n');
    const lastUser = prompt.slice(
      prompt.lastIndexOf('<|im_start|>assistant\n', generation - 1) + 1,
      generation,
    );
    const system = /^<\|im_start\|>system\n[\s\S]*?<\|im_end\|>/.exec(prompt)?.[0] ?? '';
    let kind: ReplyKind;
    let text: string;
    const task = taskPattern.exec(lastUser);
    const shell = tools.find((tool) => shellTools.includes(String(tool.name)));
    if (tools.length === 0) {
      kind = 'side';
      text = 'Proof file';
    } else if (lastUser.includes('<tool_response>') || !task || !shell) {
      kind = 'final';
      text = '<think>\nThe tool wrote the file.\n</think>\n\nDone: the file is written.';
    } else {
      kind = 'tool_call';
      const [, file, word] = task as RegExpExecArray;
      const command = `echo ${word} > ${file} && cat ${file}`;
      text = `<think>\nThe user wants ${file}; the shell tool writes it.\n</think>\n\n<tool_call>\n${pythonJson({ name: shell.name, arguments: shellArguments(shell, command) })}\n</tool_call>`;
    }
    const ids = scripted?.ids ?? this.encode(`${text}<|im_end|>`);
    // Distinct, known logprobs per position, so the trajectory can be checked token by token.
    const logprobs = ids.map((_, index) => -((index % 7) + 1) / 16);
    this.replies.push({
      kind,
      ids,
      logprobs,
      promptTokens: inputIds.length,
      tools: tools.map((tool) => String(tool.name)),
      systemTokens: system === '' ? 0 : this.encode(system).length,
    });
    return { ids, text: this.decode(ids), logprobs };
  }
}
