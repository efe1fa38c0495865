import type { ChatMessage, Tool } from '@dressage/protocol';
import { beforeAll, describe, expect, it } from 'vitest';
import { qwen35ChatTemplatePath, qwenModelDirectory } from './__fixtures__/harness.js';
import { createProxyConfig } from './config.js';
import { loadPromptTokenizer, type PromptTokenizer } from './prompt-tokenizer.js';
import {
  commitStep,
  planStep,
  renderedDigest,
  Session,
  type Step,
  type StepPlan,
  snapshotMessages,
} from './session.js';

// Steps continue the previous step's render instead of rendering the whole history again. With the
// real tokenizer and the qwen3_5 renderer, a session that continues renders and one that always
// renders in full must route, segment, tokenize and snapshot every request identically.

const readTool: Tool = {
  type: 'function',
  function: { name: 'read_file', parameters: { type: 'object', properties: { path: { type: 'string' } } } },
};
const listTool: Tool = { type: 'function', function: { name: 'list_dir', parameters: { type: 'object' } } };

interface Reply {
  message: ChatMessage;
  raw: string;
}

const replies: Reply[] = [
  {
    message: {
      role: 'assistant',
      content: null,
      reasoning_content: 'Read it first.',
      tool_calls: [
        { id: 'call_a', type: 'function', function: { name: 'read_file', arguments: '{"path": "a.txt"}' } },
      ],
    },
    raw: 'Read it first.\n</think>\n\n<tool_call>\n<function=read_file>\n<parameter=path>\na.txt\n</parameter>\n</function>\n</tool_call><|im_end|>',
  },
  {
    message: { role: 'assistant', content: 'It says hello.', reasoning_content: 'Got it.' },
    raw: 'Got it.\n</think>\n\nIt says hello.<|im_end|>',
  },
  {
    message: { role: 'assistant', content: 'Done.', reasoning_content: '' },
    raw: '\n</think>\n\nDone.<|im_end|>',
  },
];

const user = (content: string): ChatMessage => ({ role: 'user', content });
// What an agent sends back: its own copy of the reply (JSON round trip), as the SDK does.
const echo = (index: number): ChatMessage =>
  JSON.parse(JSON.stringify(replies[index % replies.length]!.message));

/** Requests of one session: appends, a tool result run, a rewrite, a branch, a tools change, content parts. */
function requests(): Array<{ messages: ChatMessage[]; tools: Tool[] | null }> {
  const system: ChatMessage = { role: 'system', content: 'You are careful.' };
  const toolResult: ChatMessage = {
    role: 'tool',
    content: 'hello',
    tool_call_id: 'call_a',
    name: 'read_file',
  };
  const turn1 = [system, user('What is in a.txt?')];
  const turn2 = [...turn1, echo(0), toolResult, { ...toolResult, content: 'again' }];
  const turn3 = [...turn2, echo(1), user('Thanks. Now b.txt?')];
  const turn4 = [...turn3, echo(2), user('And c.txt?')];
  return [
    { messages: turn1, tools: [readTool] },
    { messages: turn2, tools: [readTool] },
    { messages: turn3, tools: [readTool] },
    { messages: turn4, tools: [readTool] },
    // A branch back to turn 3 with another question.
    { messages: [...turn3, echo(2), user('Or d.txt?')], tools: [readTool] },
    // The tools change: no earlier render is a prefix.
    { messages: [...turn4, echo(0), user('List the directory.')], tools: [readTool, listTool] },
    // The reply comes back as content parts: not the same as sent, so rendered in full.
    {
      messages: [
        ...turn4,
        echo(0),
        user('List the directory.'),
        { role: 'assistant', content: [{ type: 'text', text: 'Done.' }] } as ChatMessage,
        user('Bye.'),
      ],
      tools: [readTool, listTool],
    },
    // An earlier message rewritten.
    { messages: [system, user('What is in A.TXT?'), echo(0), toolResult], tools: [readTool] },
    { messages: [system, user('Unrelated.')], tools: [readTool] },
    // The first request again: its reply makes the first step's snapshot once more.
    { messages: turn1, tools: [readTool] },
    // Continues that latest step, but the second step's longer snapshot (another lineage) also
    // starts the request, and ranks first.
    { messages: turn3, tools: [readTool] },
  ];
}

let tokenizer: PromptTokenizer;
beforeAll(async () => {
  tokenizer = await loadPromptTokenizer(
    createProxyConfig({ tokenizerPath: qwenModelDirectory, chatTemplate: qwen35ChatTemplatePath }),
  );
});

function run(continueRenders: boolean) {
  let fullRenders = 0;
  const used: PromptTokenizer = {
    ...tokenizer,
    render: (messages, tools, addGenerationPrompt) => {
      fullRenders++;
      return tokenizer.render(messages, tools, addGenerationPrompt);
    },
    renderFrom: continueRenders ? tokenizer.renderFrom : () => null,
  };
  const options = { tokenizer: used, mode: 'tito' as const };
  const session = new Session('s', 'g');
  const plans: StepPlan[] = [];
  requests().forEach((request, index) => {
    const plan = planStep(session, `turn-${index}`, request.messages, request.tools, options);
    plans.push(plan);
    const reply = replies[index % replies.length]!;
    const ids = tokenizer.encodeText(reply.raw);
    commitStep(
      session,
      plan,
      {
        ids,
        logprobs: new Float32Array(ids.length),
        versionRuns: [{ end: ids.length, version: 'v1' }],
        logprobsInvalid: false,
        finishReason: 'stop',
        assistantMessage: reply.message,
        rawText: reply.raw,
        requestVersion: 'v1',
      },
      options,
    );
  });
  return { session, plans, fullRenders };
}

describe('render continuation', () => {
  it('routes, segments, tokenizes and snapshots exactly as full renders do, with fewer of them', () => {
    const continued = run(true);
    const full = run(false);
    expect(continued.plans.map((plan) => plan.routeType)).toEqual(full.plans.map((plan) => plan.routeType));
    // The scenario covers every route: appends, a branch, new segments.
    expect(new Set(full.plans.map((plan) => plan.routeType))).toEqual(
      new Set(['create', 'append', 'branch']),
    );
    for (let index = 0; index < full.plans.length; index++) {
      const left = continued.plans[index]!;
      const right = full.plans[index]!;
      expect(left.segmentReasons).toEqual(right.segmentReasons);
      expect(left.lineageReasons).toEqual(right.lineageReasons);
      expect(left.baseStep?.index ?? null).toBe(right.baseStep?.index ?? null);
      expect(Array.from(left.promptIds)).toEqual(Array.from(right.promptIds));
      const step = continued.session.steps[index]!;
      const text = tokenizer.render(snapshotMessages(step), step.tools, false);
      expect(step.snapshotDigest).toBe(renderedDigest(text));
      expect(step.snapshotRenderedLength).toBe(text.length);
      expect(full.session.steps[index]!.snapshotDigest).toBe(step.snapshotDigest);
    }
    // Without continuation: two full renders a step. With it: only where the previous step's render
    // does not start the request (the first request, the branch, the tools change, the content
    // parts, the rewrite, the two unrelated requests).
    expect(full.fullRenders).toBe(2 * full.plans.length);
    expect(continued.fullRenders).toBe(2 * 7);
  });

  it('routes by digests exactly as comparing the rendered texts does', () => {
    const { session, plans } = run(true);
    const snapshots = session.steps.map((step) =>
      tokenizer.render(snapshotMessages(step), step.tools, false),
    );
    const routes = requests().map((request, index) => {
      // The §1.7 candidate order over the steps recorded before this request, by text.
      const text = tokenizer.render(request.messages, request.tools, true);
      const before = session.steps.slice(0, index);
      const latest = new Map(before.map((step) => [step.lineage, step.index]));
      const ranks = (left: Step, right: Step) => {
        const leftLength = snapshots[left.index]!.length;
        const rightLength = snapshots[right.index]!.length;
        if (leftLength !== rightLength) return leftLength > rightLength;
        const leftLatest = latest.get(left.lineage) === left.index;
        const rightLatest = latest.get(right.lineage) === right.index;
        if (leftLatest !== rightLatest) return leftLatest;
        if (left.index !== right.index) return left.index > right.index;
        return left.lineage.index < right.lineage.index;
      };
      let best: Step | null = null;
      for (const step of before)
        if (text.startsWith(snapshots[step.index]!) && (best === null || ranks(step, best))) best = step;
      const plan = plans[index]!;
      if (best === null)
        expect(plan.baseStep === null || plan.segmentReasons.includes('tools_changed')).toBe(true);
      else expect(plan.baseStep).toBe(best);
      return best === null ? null : [best.index, plan.routeType];
    });
    // The last request continues the latest step, yet branches from the longer second step.
    expect(routes.at(-1)).toEqual([1, 'branch']);
  });
});
