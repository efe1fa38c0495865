// @dressage/paddock from its tarball: the BlackboxServer a blackbox sandbox pool runs is found in the
// installed package, and a whitebox toolbox answers a tool call of a model response.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { blackboxSlotServer, Toolbox } from '@dressage/paddock';
import { fingerprintOf } from '@dressage/paddock/internal';

// The slot server is the installed dressage-blackbox-server, its install bound into the slot.
const server = blackboxSlotServer();
const script = server.command.at(-1);
assert.ok(existsSync(script), `${script} is installed`);
assert.ok(server.readOnlyMounts.some((mount) => script.startsWith(mount)));

// The building blocks are a subpath of their own.
assert.equal(typeof fingerprintOf, 'function');

const tools = new Toolbox([
  function double(args) {
    return String(2 * Number(args.n));
  },
]);
const turn = await tools.executeTools(
  {
    choices: [
      {
        index: 0,
        finish_reason: 'tool_calls',
        message: {
          role: 'assistant',
          content: '',
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'double', arguments: '{"n":21}' } }],
        },
      },
    ],
  },
  undefined,
);
// The assistant message with its call, then the tool's answer.
assert.deepEqual(
  turn.messages.map((message) => [message.role, message.content]),
  [
    ['assistant', ''],
    ['tool', '42'],
  ],
);
console.log(`the blackbox slot server is ${script}; a tool call answered ${turn.messages[1].content}`);
