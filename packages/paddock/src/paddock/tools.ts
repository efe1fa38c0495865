import {
  type ChatMessage,
  DressageError,
  issuesFromZodError,
  type Tool,
  type ToolCall,
} from '@dressage/protocol';
import { z } from 'zod';
import type { WhiteboxToolPaddock } from './whitebox-tools.js';

/** What a tool returns: the text the model reads, or that text with metadata for logs. */
export type ToolOutput = string | { content: string; metadata?: Record<string, unknown> };

/**
 * The part of a chat completion a toolbox reads: the first choice's text and tool calls. A
 * `ChatCompletionResponse` (what `context.chat` answers) is one.
 */
export interface ToolCallingCompletion {
  choices: readonly {
    message: {
      content?: string | null;
      tool_calls?: readonly { id?: string; type?: string; function: ToolCall['function'] }[] | null;
    };
  }[];
}

/**
 * A tool of a whitebox agent, declared once: its name and description as the model sees them, its
 * arguments as a zod object schema (validated before `run`; the model sees the schema's JSON Schema),
 * and the function that runs it. `Context` is what the agent passes to every call (the episode, a
 * sandbox).
 */
export interface ToolDefinition<Args = Record<string, unknown>, Context = unknown> {
  /** The function name the model calls (`^[A-Za-z0-9_-]{1,64}$`). */
  name: string;
  description?: string;
  /**
   * The arguments. Unset: the tool takes any JSON object and the model sees
   * `{"type":"object","properties":{}}` (a plain function).
   */
  parameters?: z.ZodType<Args>;
  run(args: Args, context: Context): ToolOutput | Promise<ToolOutput>;
}

/** Declares a tool with typed, validated arguments (the identity function, for type inference). */
export function defineTool<Args, Context = unknown>(
  definition: ToolDefinition<Args, Context>,
): ToolDefinition<Args, Context> {
  return definition;
}

/** A tool of any argument type (one toolbox holds tools of different arguments). */
// biome-ignore lint/suspicious/noExplicitAny: the arguments are checked by each tool's own schema
export type AnyToolDefinition<Context = unknown> = ToolDefinition<any, Context>;

/** A tool call the model made, parsed from a chat completion. */
export interface ParsedToolCall {
  id: string;
  name: string;
  /** The arguments text exactly as the model wrote it. */
  arguments: string;
  /** The response's own `function` object (kept as is, so the conversation replays byte for byte). */
  function: ToolCall['function'];
}

/** One executed tool call. */
export interface ExecutedToolCall extends ParsedToolCall {
  /** True when the name is one of the toolbox's tools. */
  known: boolean;
  /** The text sent back to the model (the tool's output, or the error message). */
  content: string;
  metadata: Record<string, unknown>;
  /**
   * Why the call failed: `not_found` (no such tool), `invalid_argument` (arguments not JSON or not
   * matching the schema), or the code of the error the tool threw. Null when it ran.
   */
  error: { code: string; message: string } | null;
}

/** What {@link Toolbox.executeTools} returns. */
export interface ToolTurn {
  /** The calls, in the model's order. Empty when the model called no tool. */
  calls: ExecutedToolCall[];
  /**
   * The messages to append to the conversation: the assistant message with its tool calls, then one
   * `tool` message per call. Empty when the model called no tool.
   */
  messages: ChatMessage[];
}

const namePattern = /^[A-Za-z0-9_-]{1,64}$/;

/** The text of a chat completion's first choice (`''` when it has none). */
export function assistantText(response: ToolCallingCompletion): string {
  return response.choices[0]?.message.content ?? '';
}

/** The tool calls of a chat completion's first choice (none when it has none). */
export function parseToolCalls(response: ToolCallingCompletion): ParsedToolCall[] {
  const calls = response.choices[0]?.message.tool_calls ?? [];
  return calls.map((call, position) => {
    const fn = call.function;
    const id = typeof call.id === 'string' && call.id !== '' ? call.id : `call_${position}`;
    const args = fn.arguments;
    return {
      id,
      name: fn.name,
      arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}),
      function: fn,
    };
  });
}

// A tool's parameters as the model sees them: the schema's JSON Schema without its dialect line.
function jsonSchemaOf(schema: z.ZodType | undefined): NonNullable<Tool['function']['parameters']> {
  if (schema === undefined) return { type: 'object', properties: {} };
  const { $schema: _dialect, ...rest } = z.toJSONSchema(schema, { io: 'input' });
  return rest;
}

function outputOf(output: ToolOutput): { content: string; metadata: Record<string, unknown> } {
  return typeof output === 'string'
    ? { content: output, metadata: {} }
    : { content: String(output.content), metadata: output.metadata ?? {} };
}

/**
 * A whitebox agent's tools, declared once: {@link Toolbox.getTools} is the OpenAI tool list to send,
 * {@link Toolbox.executeTools} runs the calls of a model response and gives the messages to append
 * (the reference's `get_tools()` and `execute_tool(response)`). Bad arguments and unknown tools are
 * answered to the model as a tool message naming the problem, never thrown, so the trajectory
 * continues and the model can learn from it.
 */
export class Toolbox<Context = unknown> {
  readonly #byName = new Map<string, AnyToolDefinition<Context>>();
  readonly #tools: Tool[];

  /**
   * Declares the tools: definitions (see {@link defineTool}), or plain functions, named by the
   * function's own name and called with the arguments object as the model wrote it.
   */
  constructor(
    tools: readonly (
      | AnyToolDefinition<Context>
      | ((args: Record<string, unknown>, context: Context) => ToolOutput | Promise<ToolOutput>)
    )[],
  ) {
    for (const entry of tools) {
      const tool: AnyToolDefinition<Context> =
        typeof entry === 'function'
          ? { name: entry.name, run: entry as AnyToolDefinition<Context>['run'] }
          : entry;
      if (!namePattern.test(tool.name)) {
        throw new DressageError({
          code: 'invalid_argument',
          message: `Tool name ${JSON.stringify(tool.name)} must match ${namePattern} (OpenAI function names)`,
        });
      }
      if (this.#byName.has(tool.name)) {
        throw new DressageError({
          code: 'already_exists',
          message: `Two tools are named ${JSON.stringify(tool.name)}`,
        });
      }
      this.#byName.set(tool.name, tool);
    }
    // Built once: the list is part of every prompt, and its bytes must not vary between calls.
    this.#tools = [...this.#byName.values()].map((tool) => ({
      type: 'function',
      function: {
        name: tool.name,
        ...(tool.description === undefined ? {} : { description: tool.description }),
        parameters: jsonSchemaOf(tool.parameters as z.ZodType | undefined),
      },
    }));
  }

  /** The tool names, in declaration order. */
  names(): string[] {
    return [...this.#byName.keys()];
  }

  /** The OpenAI tool list (`tools` of a chat completion request), the same object every call. */
  getTools(): Tool[] {
    return this.#tools;
  }

  /** Runs one parsed call; failures become the message the model reads. */
  async execute(call: ParsedToolCall, context: Context): Promise<ExecutedToolCall> {
    const tool = this.#byName.get(call.name);
    const failed = (code: string, message: string): ExecutedToolCall => ({
      ...call,
      known: tool !== undefined,
      content: `Error: ${message}`,
      metadata: {},
      error: { code, message },
    });
    if (tool === undefined) {
      return failed(
        'not_found',
        `no tool named ${JSON.stringify(call.name)}; the tools are ${this.names().join(', ')}`,
      );
    }
    let raw: unknown;
    try {
      raw = call.arguments.trim() === '' ? {} : JSON.parse(call.arguments);
    } catch {
      return failed(
        'invalid_argument',
        `the arguments of ${call.name} are not valid JSON: ${call.arguments}`,
      );
    }
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
      return failed('invalid_argument', `the arguments of ${call.name} must be a JSON object`);
    }
    let args: unknown = raw;
    if (tool.parameters !== undefined) {
      const parsed = (tool.parameters as z.ZodType).safeParse(raw);
      if (!parsed.success) {
        const issues = issuesFromZodError(parsed.error)
          .map((issue) => (issue.path === '' ? issue.message : `${issue.path}: ${issue.message}`))
          .join('; ');
        return failed('invalid_argument', `invalid arguments for ${call.name}: ${issues}`);
      }
      args = parsed.data;
    }
    try {
      const output = outputOf(await tool.run(args as never, context));
      return { ...call, known: true, ...output, error: null };
    } catch (error) {
      const reason = DressageError.from(error);
      return failed(reason.code, `${call.name} failed: ${reason.message}`);
    }
  }

  /**
   * Runs every tool call of a chat completion (in order) and returns them with the messages to
   * append: the assistant message (its text and calls as the model wrote them) and one `tool`
   * message per call.
   */
  async executeTools(response: ToolCallingCompletion, context: Context): Promise<ToolTurn> {
    const parsed = parseToolCalls(response);
    if (parsed.length === 0) return { calls: [], messages: [] };
    const calls: ExecutedToolCall[] = [];
    for (const call of parsed) calls.push(await this.execute(call, context));
    const assistant: ChatMessage = {
      role: 'assistant',
      content: assistantText(response),
      tool_calls: parsed.map((call) => ({ id: call.id, type: 'function', function: call.function })),
    };
    const results = calls.map(
      (call): ChatMessage => ({ role: 'tool', tool_call_id: call.id, content: call.content }),
    );
    return { calls, messages: [assistant, ...results] };
  }
}

/** The sandbox of a {@link PaddockWhiteboxAgent}'s run, as the context of {@link sandboxTools}. */
export interface SandboxToolContext {
  sandbox: WhiteboxToolPaddock;
}

const shellArgs = z.strictObject({
  command: z.union([z.string().min(1), z.array(z.string()).min(1)]).describe('The command to run'),
  cwd: z.string().optional(),
  timeout: z.number().positive().optional().describe('Seconds'),
  stdin: z.string().optional(),
});
const readArgs = z.strictObject({
  path: z.string().min(1),
  max_bytes: z.int().positive().optional(),
});
const writeArgs = z.strictObject({
  path: z.string().min(1),
  content: z.string(),
  append: z.boolean().optional(),
});

/**
 * The paddock sandbox's tools (`shell.exec`, `file.read`, `file.write`) as toolbox tools named
 * `shell_exec`, `file_read`, `file_write` (OpenAI names allow no dot), with validated arguments;
 * they run in `context.sandbox`.
 */
export function sandboxTools<Context extends SandboxToolContext>(): AnyToolDefinition<Context>[] {
  const tools = [
    defineTool({
      name: 'shell_exec',
      description: 'Run a shell command in the sandbox; returns its output.',
      parameters: shellArgs,
      run: async (args, context: SandboxToolContext) => {
        const [content, metadata] = await context.sandbox.toolCall('shell.exec', args);
        return { content, metadata };
      },
    }),
    defineTool({
      name: 'file_read',
      description: 'Read a file of the sandbox.',
      parameters: readArgs,
      run: async (args, context: SandboxToolContext) => {
        const [content, metadata] = await context.sandbox.toolCall('file.read', args);
        return { content, metadata };
      },
    }),
    defineTool({
      name: 'file_write',
      description: 'Write a file of the sandbox.',
      parameters: writeArgs,
      run: async (args, context: SandboxToolContext) => {
        const [content, metadata] = await context.sandbox.toolCall('file.write', args);
        return { content: content === '' ? `wrote ${args.path}` : content, metadata };
      },
    }),
  ];
  return tools as unknown as AnyToolDefinition<Context>[];
}
