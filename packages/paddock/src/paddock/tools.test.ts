import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { defineTool, parseToolCalls, sandboxTools, Toolbox } from './tools.js';
import type { WhiteboxToolPaddock } from './whitebox-tools.js';

const reply = (calls: { id?: string; name: string; arguments: string }[], content: string | null = null) => ({
  choices: [
    {
      message: {
        content,
        tool_calls: calls.map(({ id, ...fn }) => ({ ...(id ? { id } : {}), type: 'function', function: fn })),
      },
    },
  ],
});

const forecast = defineTool({
  name: 'forecast',
  description: 'The forecast of a city',
  parameters: z.object({ city: z.string().min(1), days: z.number().int().min(1).max(7).default(1) }),
  run: ({ city, days }, context: { station: string }) =>
    `${city}: rain for ${days} days (${context.station})`,
});

function clock() {
  return 'noon';
}

describe('Toolbox', () => {
  const toolbox = new Toolbox<{ station: string }>([forecast, clock]);

  it('lists zod-declared tools and plain functions as OpenAI tools', () => {
    expect(toolbox.getTools()).toEqual([
      {
        type: 'function',
        function: {
          name: 'forecast',
          description: 'The forecast of a city',
          parameters: {
            type: 'object',
            properties: {
              city: { type: 'string', minLength: 1 },
              days: { type: 'integer', minimum: 1, maximum: 7, default: 1 },
            },
            required: ['city'],
          },
        },
      },
      { type: 'function', function: { name: 'clock', parameters: { type: 'object', properties: {} } } },
    ]);
    expect(toolbox.getTools()).toBe(toolbox.getTools());
  });

  it('runs the calls and returns the messages to append', async () => {
    const response = reply(
      [
        { id: 'c1', name: 'forecast', arguments: '{"city":"Oslo"}' },
        { id: 'c2', name: 'clock', arguments: '{}' },
      ],
      'checking',
    );
    const turn = await toolbox.executeTools(response, { station: 'north' });
    expect(turn.calls.map((call) => [call.name, call.known, call.error])).toEqual([
      ['forecast', true, null],
      ['clock', true, null],
    ]);
    expect(turn.messages).toEqual([
      {
        role: 'assistant',
        content: 'checking',
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'forecast', arguments: '{"city":"Oslo"}' } },
          { id: 'c2', type: 'function', function: { name: 'clock', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'Oslo: rain for 1 days (north)' },
      { role: 'tool', tool_call_id: 'c2', content: 'noon' },
    ]);
  });

  it('answers bad arguments, unknown tools and failing tools with a tool message, never a throw', async () => {
    const failing = new Toolbox([
      defineTool({
        name: 'broken',
        run: () => {
          throw new Error('station offline');
        },
      }),
    ]);
    const turn = await toolbox.executeTools(
      reply([
        { id: 'a', name: 'forecast', arguments: '{"city":3}' },
        { id: 'b', name: 'forecast', arguments: '{"city":' },
        { id: 'c', name: 'search', arguments: '{}' },
        { id: 'd', name: 'forecast', arguments: '[1]' },
      ]),
      { station: 'north' },
    );
    expect(turn.calls.map((call) => [call.error?.code, call.content])).toEqual([
      [
        'invalid_argument',
        'Error: invalid arguments for forecast: city: Invalid input: expected string, received number',
      ],
      ['invalid_argument', 'Error: the arguments of forecast are not valid JSON: {"city":'],
      ['not_found', 'Error: no tool named "search"; the tools are forecast, clock'],
      ['invalid_argument', 'Error: the arguments of forecast must be a JSON object'],
    ]);
    expect(turn.calls.map((call) => call.known)).toEqual([true, true, false, true]);
    expect(turn.messages.slice(1).map((message) => message.role)).toEqual(['tool', 'tool', 'tool', 'tool']);
    const broken = await failing.executeTools(reply([{ name: 'broken', arguments: '' }]), undefined);
    expect(broken.calls[0]).toMatchObject({ id: 'call_0', content: 'Error: broken failed: station offline' });
  });

  it('returns nothing to append when the model called no tool', async () => {
    expect(
      await toolbox.executeTools({ choices: [{ message: { content: 'hi' } }] }, { station: '' }),
    ).toEqual({
      calls: [],
      messages: [],
    });
    expect(parseToolCalls({ choices: [] })).toEqual([]);
  });

  it('refuses names the OpenAI API refuses, and duplicates', () => {
    expect(() => new Toolbox([defineTool({ name: 'shell.exec', run: () => '' })])).toThrowError(/must match/);
    expect(() => new Toolbox([clock, clock])).toThrowError(/Two tools are named "clock"/);
  });
});

describe('sandboxTools', () => {
  it('runs shell_exec, file_read and file_write in the context sandbox with validated arguments', async () => {
    const calls: [string, unknown][] = [];
    const sandbox = {
      async toolCall(toolId: string, args: Record<string, unknown>) {
        calls.push([toolId, args]);
        return [toolId === 'file.write' ? '' : `${toolId} ok`, { toolId }] as [
          string,
          Record<string, unknown>,
        ];
      },
    } as unknown as WhiteboxToolPaddock;
    const toolbox = new Toolbox(sandboxTools());
    expect(toolbox.names()).toEqual(['shell_exec', 'file_read', 'file_write']);
    const turn = await toolbox.executeTools(
      reply([
        { id: '1', name: 'shell_exec', arguments: '{"command":"ls"}' },
        { id: '2', name: 'file_write', arguments: '{"path":"a.txt","content":"x"}' },
        { id: '3', name: 'file_read', arguments: '{"path":""}' },
      ]),
      { sandbox },
    );
    expect(turn.calls.map((call) => call.content)).toEqual([
      'shell.exec ok',
      'wrote a.txt',
      'Error: invalid arguments for file_read: path: Too small: expected string to have >=1 characters',
    ]);
    expect(calls).toEqual([
      ['shell.exec', { command: 'ls' }],
      ['file.write', { path: 'a.txt', content: 'x' }],
    ]);
  });
});
