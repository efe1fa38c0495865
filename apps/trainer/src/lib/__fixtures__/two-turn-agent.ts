// An agent that asks twice in one session (in snapshot mode its trajectory has two segments), a
// generate hook that runs it and marks its samples, and a reward by distillation teacher, for the
// segment, metric and hook tests of a run.
import { makeGenerate, WhiteboxAgent, type WhiteboxRunContext } from '@dressage/paddock';
import type { ChatMessage, Sample } from '@dressage/protocol';
import type { SamplingParams } from '@dressage/schedulers';
import type { RunGenerateContext } from '../hooks.js';

export class TwoTurnAgent extends WhiteboxAgent {
  async run(sample: Sample, context: WhiteboxRunContext): Promise<null> {
    const question: ChatMessage = { role: 'user', content: String(sample.prompt) };
    const first = await context.chat({ messages: [question] });
    const reply = first.choices[0]?.message.content ?? '';
    await context.chat({
      messages: [question, { role: 'assistant', content: reply }, { role: 'user', content: 'And tomorrow?' }],
    });
    // No final answer of its own: the sample's response is the conversation's.
    return null;
  }
}

export const rewards = {
  by_teacher(sample: Sample): number {
    return sample.metadata.teacher_id === 'alpha' ? 1 : 0;
  },
};

/** `hooks.generate`: the two-turn agent through the run's proxy, each sample marked as the hook's. */
export function twoTurnGenerate(sample: Sample, samplingParams: SamplingParams, context: RunGenerateContext) {
  const marked = { ...sample, metadata: { ...sample.metadata, generated_by: 'hook' } };
  return makeGenerate(TwoTurnAgent, { proxy: context.proxy, proxyUrl: context.proxyUrl })(
    marked,
    samplingParams,
    context,
  );
}
