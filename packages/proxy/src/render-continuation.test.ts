import type { ChatMessage, Tool } from '@dressage/protocol';
import type OpenAI from 'openai';
import { beforeAll, describe, expect, it } from 'vitest';
import { qwen35ChatTemplatePath, qwenModelDirectory, startHarness } from './__fixtures__/harness.js';
import { random } from './__fixtures__/seeded-random.js';
import { createProxyConfig } from './config.js';
import { loadPromptTokenizer, type PromptTokenizer } from './prompt-tokenizer.js';
import { Session, type Step, snapshotMessages } from './session.js';
import { commitStep, planStep, renderedDigest, type StepPlan } from './step-plan.js';

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
      expect(Array.from(left.promptIds.toInt32Array())).toEqual(Array.from(right.promptIds.toInt32Array()));
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

// The model directory's own Qwen3 template drops reasoning before the last user query and writes an
// empty think block on the last turn only while it is last: the renderer continues a render only
// where no earlier text changes, and renders in full elsewhere.
describe('render continuation with the official Qwen3 template (reasoning not preserved)', () => {
  let qwen3: PromptTokenizer;
  beforeAll(async () => {
    qwen3 = await loadPromptTokenizer(
      createProxyConfig({ tokenizerPath: qwenModelDirectory, tokenBuildModel: 'qwen3' }),
    );
  });

  const callsOf = (message: ChatMessage) => (message.role === 'assistant' ? (message.tool_calls ?? []) : []);

  const texts = ['ok', 'src/a.ts:3: const a = 1;', 'résumé ✓ 日本語', '  padded \n', 'x'.repeat(300), ''];

  /** A reply of the Qwen3 format: reasoning (sometimes none), text, tool calls. */
  function reply(next: () => number, turn: number): Reply {
    const reasoning = next() < 0.25 ? '' : `Look at step ${turn} ${texts[Math.floor(next() * 4)]}`.trim();
    const calls = Array.from({ length: next() < 0.8 ? 1 + Math.floor(next() * 2) : 0 }, (_, index) => ({
      id: `call_${turn}_${index}`,
      type: 'function' as const,
      function: { name: 'run_command', arguments: JSON.stringify({ command: `ls ${turn} ${index}` }) },
    }));
    const content = calls.length > 0 && next() < 0.6 ? '' : `Turn ${turn} done.`;
    const message: ChatMessage = { role: 'assistant', content, reasoning_content: reasoning };
    if (calls.length > 0) message.tool_calls = calls;
    const callText = calls
      .map(
        (call) =>
          `<tool_call>\n{"name": "run_command", "arguments": ${call.function.arguments}}\n</tool_call>`,
      )
      .join('\n');
    const raw = `${reasoning}\n</think>\n\n${content}${content !== '' && callText !== '' ? '\n' : ''}${callText}<|im_end|>`;
    return { message, raw };
  }

  /** One session's requests: agent steps with tool results, sometimes a new query or a wrapped result. */
  function conversation(seed: number, turns: number) {
    const next = random(seed);
    const messages: ChatMessage[] = [];
    if (next() < 0.7) messages.push({ role: 'system', content: 'You are a coding agent.' });
    if (seed % 5 !== 0) messages.push(user(`Fix the bug ${seed}.`));
    const steps: Array<{ messages: ChatMessage[]; reply: Reply }> = [];
    for (let turn = 0; turn < turns; turn++) {
      const answer = reply(next, turn);
      steps.push({ messages: messages.slice(), reply: answer });
      // The agent's own copy of the reply comes back (a JSON round trip).
      messages.push(JSON.parse(JSON.stringify(answer.message)) as ChatMessage);
      for (const call of callsOf(answer.message))
        messages.push({
          role: 'tool',
          content: texts[Math.floor(next() * texts.length)]!,
          tool_call_id: call.id,
        });
      const extra = next();
      if (extra < 0.15) messages.push(user(`Also check case ${turn}.`));
      else if (extra < 0.2) messages.push(user(`<tool_response>\nlog ${turn}\n</tool_response>`));
      if (messages.at(-1)!.role === 'assistant') messages.push(user(`Go on (${turn}).`));
    }
    return steps;
  }

  interface Counting {
    tokenizer: PromptTokenizer;
    /** Whole renders, and the characters rendered by whole renders and continuations. */
    counts: { fullRenders: number; characters: number; continuedFrom: number[] };
  }

  function counting(base: PromptTokenizer, continueRenders: boolean): Counting {
    const counts = { fullRenders: 0, characters: 0, continuedFrom: [] as number[] };
    const tokenizer: PromptTokenizer = {
      ...base,
      render: (messages, tools, addGenerationPrompt) => {
        counts.fullRenders++;
        const text = base.render(messages, tools, addGenerationPrompt);
        counts.characters += text.length;
        return text;
      },
      renderFrom: (messages, from, tools, addGenerationPrompt) => {
        if (!continueRenders) return null;
        const text = base.renderFrom(messages, from, tools, addGenerationPrompt);
        if (text !== null) {
          counts.continuedFrom.push(from);
          counts.characters += text.length;
        }
        return text;
      },
    };
    return { tokenizer, counts };
  }

  function play(tokenizer: PromptTokenizer, steps: ReturnType<typeof conversation>, tools: Tool[] | null) {
    const options = { tokenizer, mode: 'tito' as const };
    const session = new Session('s', 'g');
    const plans = steps.map((step) => {
      const plan = planStep(session, 'turn', step.messages, tools, options);
      const ids = qwen3.encodeText(step.reply.raw);
      commitStep(
        session,
        plan,
        {
          ids,
          logprobs: new Float32Array(ids.length),
          versionRuns: [{ end: ids.length, version: 'v1' }],
          logprobsInvalid: false,
          finishReason: 'stop',
          assistantMessage: step.reply.message,
          requestVersion: 'v1',
        },
        options,
      );
      return plan;
    });
    return { session, plans };
  }

  it('routes, tokenizes and snapshots as full renders do, over randomized tool conversations', () => {
    let continuations = 0;
    let steps = 0;
    const routes = new Set<string>();
    for (let seed = 1; seed <= 40; seed++) {
      const requests = conversation(seed, 4 + (seed % 9));
      steps += requests.length;
      const tools = seed % 4 === 0 ? null : [readTool];
      const continued = counting(qwen3, true);
      const full = counting(qwen3, false);
      const left = play(continued.tokenizer, requests, tools);
      const right = play(full.tokenizer, requests, tools);
      for (let index = 0; index < requests.length; index++) {
        const a = left.plans[index]!;
        const b = right.plans[index]!;
        expect(a.routeType).toBe(b.routeType);
        expect(a.baseStep?.index ?? null).toBe(b.baseStep?.index ?? null);
        expect(a.segmentReasons).toEqual(b.segmentReasons);
        expect(Array.from(a.promptIds.toInt32Array())).toEqual(Array.from(b.promptIds.toInt32Array()));
        routes.add(a.routeType);
        // The snapshot is the template's render of the step's messages, byte for byte.
        const step = left.session.steps[index]!;
        const text = qwen3.render(snapshotMessages(step), step.tools, false);
        expect(step.snapshotRenderedLength).toBe(text.length);
        expect(step.snapshotDigest).toBe(renderedDigest(text));
        expect(right.session.steps[index]!.snapshotDigest).toBe(step.snapshotDigest);
      }
      continuations += continued.counts.continuedFrom.length;
      // Each continued render is one whole render fewer.
      expect(continued.counts.fullRenders).toBe(
        full.counts.fullRenders - continued.counts.continuedFrom.length,
      );
    }
    // Most renders continue (the plan's and the snapshot's of every step but a session's first).
    expect(continuations).toBeGreaterThan(steps / 2);
    // Turns without reasoning leave a snapshot that no later render starts with: other routes too.
    expect(routes).toEqual(new Set(['create', 'append', 'branch']));
  });

  it('renders only the new messages of a long tool conversation', () => {
    // An agent loop: one query, then turns of reasoning, a call and its (large) result.
    const steps: Array<{ messages: ChatMessage[]; reply: Reply }> = [];
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a coding agent.' },
      user('The tests fail. Fix them.'),
    ];
    const next = random(7);
    for (let turn = 0; turn < 60; turn++) {
      let answer = reply(next, turn);
      while (answer.message.reasoning_content === '' || callsOf(answer.message).length === 0)
        answer = reply(next, turn);
      steps.push({ messages: messages.slice(), reply: answer });
      messages.push(JSON.parse(JSON.stringify(answer.message)) as ChatMessage);
      for (const call of callsOf(answer.message))
        messages.push({
          role: 'tool',
          content: `output of ${turn}\n${'line\n'.repeat(200)}`,
          tool_call_id: call.id,
        });
    }
    const { tokenizer, counts } = counting(qwen3, true);
    const { plans, session } = play(tokenizer, steps, [readTool]);
    // Only the first request and its snapshot were rendered whole; every later request continued
    // the previous step's snapshot, and so did its own snapshot.
    expect(counts.fullRenders).toBe(2);
    expect(plans.slice(1).every((plan) => plan.routeType === 'append')).toBe(true);
    // The plan and the snapshot of each later step continue from the previous step's messages.
    const expectedFrom = steps.slice(0, -1).flatMap((step) => {
      const base = step.messages.length + 1;
      return [base, base];
    });
    expect(counts.continuedFrom).toEqual(expectedFrom);
    // What was rendered is the whole first request plus, per request, about its new messages: the
    // characters rendered grow with the conversation, not with its square.
    const last = session.steps.at(-1)!;
    expect(counts.characters).toBeLessThan(3 * last.snapshotRenderedLength);
    const text = qwen3.render(snapshotMessages(last), last.tools, false);
    expect(last.snapshotDigest).toBe(renderedDigest(text));
  });
});

describe('an agent loop through the server with the official Qwen3 template', () => {
  it('renders whole only its first request: the rest continue the previous step', async () => {
    const harness = await startHarness({
      tokenizer: 'qwen',
      // The model directory's own Qwen3 template (it drops old reasoning), the qwen3 renderer.
      config: { chatTemplate: null, tokenBuildModel: 'qwen3' },
    });
    try {
      const counts = { full: 0, continued: 0 };
      const { render, renderFrom } = harness.tokenizer;
      harness.tokenizer.render = (...args) => {
        counts.full++;
        return render(...args);
      };
      harness.tokenizer.renderFrom = (...args) => {
        const text = renderFrom(...args);
        if (text !== null) counts.continued++;
        return text;
      };
      harness.engine.script = (_request, index) => ({
        text:
          `<think>\nStep ${index}: look at the output first.\n</think>\n\n` +
          `<tool_call>\n{"name": "read_file", "arguments": {"path": "src/${index}.ts"}}\n</tool_call><|im_end|>`,
      });
      const session = { headers: { 'X-Session-Id': 'qwen3-agent' } };
      const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'The tests fail. Fix them.' },
      ];
      const turns = 12;
      for (let turn = 0; turn < turns; turn++) {
        const completion = await harness.openai.chat.completions.create(
          { model: 'qwen', messages, tools: [readTool] },
          session,
        );
        const message = completion.choices[0]!.message;
        const call = message.tool_calls![0]!;
        // The SDK's message as the agent sends it back, then the tool's output.
        messages.push(message, { role: 'tool', tool_call_id: call.id, content: `line ${turn}\n`.repeat(40) });
      }
      // The first request and its snapshot render whole; every later request and snapshot continue.
      expect(counts).toEqual({ full: 2, continued: 2 * (turns - 1) });
      const steps = harness.proxy.service.session('qwen3-agent')!.steps;
      expect(steps.map((step) => step.routeType)).toEqual(['create', ...Array(turns - 1).fill('append')]);
      const last = steps.at(-1)!;
      const text = render(snapshotMessages(last), last.tools, false);
      expect(last.snapshotRenderedLength).toBe(text.length);
      expect(last.snapshotDigest).toBe(renderedDigest(text));
    } finally {
      await harness.close();
    }
  });
});
