// A minimal tool-using agent behind the adapter interface: it loops on chat completions through the
// LLM proxy and runs `shell` tool calls in its work dir. "crash" in the user text makes it throw.
import { execFileSync } from 'node:child_process';
import {
  type AssistantMessage,
  type ChatMessage,
  chatCompletionChunkSchema,
  chatCompletionResponseSchema,
  type ToolCall,
} from '@dressage/protocol';
import type { AdapterContext, AdapterTurn, AdapterTurnResult, BlackboxAdapter } from '../blackbox/adapter.js';
import { defaultCapabilities } from '../blackbox/adapter.js';
import type { BlackboxMessage } from '../blackbox/schemas.js';

/** The scripted agent adapter. */
export class ScriptAgentAdapter implements BlackboxAdapter {
  readonly type = 'script_agent';
  readonly capabilities = defaultCapabilities;
  context: AdapterContext | null = null;
  healthy = true;
  aborts = 0;
  #history: ChatMessage[] = [];

  async init(context: AdapterContext): Promise<void> {
    this.context = context;
    if (context.systemPrompt) this.#history.push({ role: 'system', content: context.systemPrompt });
  }

  async health(): Promise<boolean> {
    return this.healthy;
  }

  async runTurn(turn: AdapterTurn): Promise<AdapterTurnResult> {
    const context = this.context as AdapterContext;
    if (turn.text.includes('crash')) throw new Error('agent process crashed');
    const outputs: BlackboxMessage[] = [];
    this.#history.push({ role: 'user', content: turn.text });
    for (let step = 0; step < 50; step++) {
      const stream = step % 2 === 1 || turn.text.includes('stream');
      const response = await fetch(`${context.proxyOrigin}${context.apiPath}/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-session-id': 'spoofed',
          // The agent's key for the LLM proxy; the proxy must not forward it upstream.
          authorization: `Bearer ${context.proxyApiKey}`,
        },
        body: JSON.stringify({
          model: 'agent-model',
          stream,
          messages: this.#history,
          tools: [{ type: 'function', function: { name: 'shell', parameters: { type: 'object' } } }],
        }),
        signal: turn.signal,
      });
      if (!response.ok)
        throw new Error(`model request failed with ${response.status}: ${await response.text()}`);
      const message: AssistantMessage = stream
        ? await readStream(response)
        : chatCompletionResponseSchema.parse(await response.json()).choices[0]!.message;
      this.#history.push(message);
      outputs.push(message as BlackboxMessage);
      const calls = message.tool_calls ?? [];
      if (calls.length === 0) return { outputs, backendSessionId: 'script-session' };
      for (const call of calls) {
        const fn = call.function;
        const args = (typeof fn.arguments === 'string' ? JSON.parse(fn.arguments) : fn.arguments) as {
          cmd: string;
        };
        let output: string;
        try {
          output = execFileSync('/bin/sh', ['-c', args.cmd], { cwd: context.workDir }).toString();
        } catch (error) {
          output = String(error);
        }
        const tool: ChatMessage = { role: 'tool', tool_call_id: call.id, content: output };
        this.#history.push(tool);
        outputs.push(tool as BlackboxMessage);
      }
    }
    return { outputs, backendSessionId: 'script-session' };
  }

  async abort(): Promise<void> {
    this.aborts += 1;
  }

  async close(): Promise<void> {}
}

async function readStream(response: Response): Promise<AssistantMessage> {
  const text = await response.text();
  let content = '';
  const calls: ToolCall[] = [];
  for (const event of text.split('\n\n')) {
    const data = event
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trim())
      .join('');
    if (data === '' || data === '[DONE]') continue;
    const delta = chatCompletionChunkSchema.parse(JSON.parse(data)).choices[0]?.delta;
    if (typeof delta?.content === 'string') content += delta.content;
    for (const call of delta?.tool_calls ?? []) {
      calls.push({
        id: call.id,
        type: 'function',
        function: { name: call.function?.name ?? '', arguments: call.function?.arguments ?? '' },
      });
    }
  }
  const message: AssistantMessage = { role: 'assistant', content };
  if (calls.length > 0) message.tool_calls = calls;
  return message;
}
