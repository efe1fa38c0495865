// The weather task of the embedded recipe: the model is asked about today's weather, may call the
// `weather` tool (the local station's reading, no arguments), reads its result, and answers with one
// word.
//
// Today's weather is part of the episode (the prompt record), not of the question: every question
// appears with every condition, so the question alone never determines the answer. A model that
// answers from memory is right one time in ten; a model that calls the tool and reads its result is
// right every time. The warm-start teaches both habits, the first more often; RL has to find out
// which one pays.
//
// The answer turn is sent without tools, so the tools change between the two model turns and the
// proxy starts a second segment: every trajectory that uses the tool exercises TITO (the tool result
// is appended to the model's own ids), tool-result masking and multi-segment training.
import {
  assistantText,
  defineTool,
  Toolbox,
  WhiteboxAgent,
  type WhiteboxRunContext,
} from '@dressage/paddock';
import type { ChatCompletionResponse, ChatMessage, Sample, Tool } from '@dressage/protocol';
import { z } from 'zod';

/** Name of the one tool the agent offers. */
export const weatherToolName = 'weather';

/** The ways the question is asked (a few phrasings, so the model does not learn one string). */
export const questions = ['Weather today?', 'Weather now?', 'Weather outside?', 'Weather here?'] as const;

/** Weather conditions the tool reports: each one token. */
export const conditions = [
  'clear',
  'rain',
  'snow',
  'wind',
  'storm',
  'mist',
  'hot',
  'cold',
  'warm',
  'dry',
] as const;

/** One episode's world: today's weather (the label) where the question is asked. */
export interface WeatherEpisode {
  question: string;
  condition: string;
}

/** What the `weather` tool returns in an episode: today's condition. */
export function forecast(episode: WeatherEpisode): string {
  return episode.condition;
}

/**
 * The agent's tools, declared once: `weather`, no arguments, answering the episode's condition.
 * Deliberately terse (no description): every prompt token is paid for in every forward pass on a
 * 2-core CPU, and the chat template's tool instructions already explain the call format.
 */
export const weatherTools = new Toolbox<WeatherEpisode>([
  defineTool({
    name: weatherToolName,
    parameters: z.object({}),
    run: (_args, episode: WeatherEpisode) => forecast(episode),
  }),
]);

/** The one tool the agent offers, as the model sees it (the warm-start shows the same list). */
export const weatherTool: Tool = weatherTools.getTools()[0] as Tool;

/** What a finished weather trajectory records in the sample's metadata for the reward and the report. */
export interface WeatherOutcome {
  called_tool: boolean;
  /** What the tool returned, when it was called. */
  tool_result?: string;
  final_answer: string;
}

/** Reward: 1 when the final answer is today's weather, else 0. */
export function weatherReward(sample: Sample): number {
  const outcome = sample.metadata.weather as WeatherOutcome | undefined;
  const label = String(sample.label ?? sample.metadata.label ?? '')
    .trim()
    .toLowerCase();
  const answer = (outcome?.final_answer ?? sample.response).trim().toLowerCase();
  return label !== '' && answer === label ? 1 : 0;
}

/** Registered by the reward registry when the recipe names this module. */
export const rewards = { weather: weatherReward };

/** Posts one chat completion (through the proxy) and returns the checked response. */
export type ChatFunction = WhiteboxRunContext['chat'];

function replyText(response: ChatCompletionResponse): string {
  return assistantText(response).trim();
}

/**
 * Runs one weather conversation: the question with the tool offered; if the model called the tool,
 * its result and a final answer turn without tools.
 */
export async function runWeatherConversation(
  chat: ChatFunction,
  episode: WeatherEpisode,
): Promise<WeatherOutcome> {
  const messages: ChatMessage[] = [{ role: 'user', content: episode.question }];
  const reply = await chat({ model: 'proxy-model', messages, tools: weatherTools.getTools() });
  const turn = await weatherTools.executeTools(reply, episode);
  const call = turn.calls.find((candidate) => candidate.known);
  if (call === undefined) return { called_tool: false, final_answer: replyText(reply) };
  messages.push(...turn.messages);
  // No tools on the answer turn: the tools change, so the proxy starts a second segment here.
  const answer = await chat({ model: 'proxy-model', messages });
  return { called_tool: true, tool_result: call.content, final_answer: replyText(answer) };
}

/** The episode of a prompt record (`prompt` is the question, `label` today's condition). */
export function episodeOf(record: { prompt?: unknown; label?: unknown }): WeatherEpisode {
  return { question: String(record.prompt ?? ''), condition: String(record.label ?? '') };
}

/** The recipe's whitebox agent: one weather conversation per sample, its outcome kept for the reward. */
export class WeatherAgent extends WhiteboxAgent {
  async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    const outcome = await runWeatherConversation(
      context.chat,
      episodeOf({ prompt: sample.prompt, label: sample.label }),
    );
    context.metadata.weather = outcome;
    return outcome.final_answer;
  }
}

/** The conversation of an agent that calls the tool and reads its result. */
export function toolConversation(episode: WeatherEpisode): ChatMessage[] {
  return [
    { role: 'user', content: episode.question },
    {
      role: 'assistant',
      content: '',
      reasoning_content: '',
      tool_calls: [
        {
          id: 'call_0',
          type: 'function',
          function: { name: weatherToolName, arguments: '{}' },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_0', content: episode.condition },
    { role: 'assistant', content: episode.condition, reasoning_content: '' },
  ];
}

/**
 * The answer a model gives from memory: one fixed condition per phrasing of the question, what it
 * "believes" the weather usually is. Every question appears with every condition, so this belief is
 * right one time in ten. A fixed belief (rather than a random condition per example) is what lets
 * the warm-start learn to copy: answers drawn at random are noise the model can never fit, and their
 * gradient drowns the one signal that teaches it to repeat the tool's result.
 */
export function memoryAnswer(question: string): string {
  const index = questions.indexOf(question as (typeof questions)[number]);
  return conditions[(index < 0 ? 0 : index * 3) % conditions.length] as string;
}

/** How many answers from memory the warm-start shows per tool-using conversation. */
export const memoryAnswersPerRecord = 2;

/**
 * Supervised warm-start examples of one prompt record: the tool-call turn (tools offered), the
 * answer turn after the tool result (no tools), and {@link memoryAnswersPerRecord} answers given
 * from memory with the tool offered but unused ({@link memoryAnswer}: right one time in ten). The
 * model comes out knowing how to use the tool, yet mostly answering from memory.
 */
export function warmStartExamples(
  record: Record<string, unknown>,
): { messages: ChatMessage[]; tools?: Tool[] }[] {
  const episode = episodeOf(record);
  const conversation = toolConversation(episode);
  const fromMemory: ChatMessage[] = [
    conversation[0]!,
    { role: 'assistant', content: memoryAnswer(episode.question), reasoning_content: '' },
  ];
  return [
    { messages: conversation.slice(0, 2), tools: [weatherTool] },
    { messages: conversation },
    ...Array.from({ length: memoryAnswersPerRecord }, () => ({ messages: fromMemory, tools: [weatherTool] })),
  ];
}
