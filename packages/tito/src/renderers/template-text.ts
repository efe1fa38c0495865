import { type ChatMessage, DressageError, type Tool, type ToolCall } from '@dressage/protocol';
import { toTemplateJson } from '../json-format.js';
import { toolCallArguments } from '../messages.js';
import type { ChatRenderer, RenderOptions } from './renderer.js';
import { argumentsNotAnObject, turnEnd } from './shared.js';

/** How the template writes one tool call: JSON inside tags, or one block per parameter. */
export type ToolCallText =
  | {
      format: 'json';
      /** Before the function name, e.g. `<tool_call>\n{"name": "`. */
      open: string;
      /** Between the name and the arguments JSON. */
      beforeArguments: string;
      /** After the arguments JSON, e.g. `}\n</tool_call>`. */
      close: string;
    }
  | {
      format: 'xml';
      /** Before the function name, e.g. `<tool_call>\n<function=`. */
      open: string;
      /** After the name of a call without parameters. */
      withoutParameters: string;
      /** Between the name and the first parameter's name. */
      beforeFirstParameter: string;
      /** Between a parameter's name and its value. */
      beforeValue: string;
      /** Between one parameter's value and the next parameter's name. */
      betweenParameters: string;
      /** After the last parameter's value. */
      afterLastParameter: string;
    };

/**
 * The literal text a chat template writes around messages, read from the template itself: the tool
 * instructions of the system turn, the tool-call format, the wrapping of tool results and the
 * generation prompt. Fixed renderers write these pieces and nothing of their own.
 */
export interface TemplateText {
  /** The system turn with tools, up to the first tool's JSON line. */
  toolsHead: string;
  /** Between two tools' JSON lines. */
  toolSeparator: string;
  /** After the last tool's JSON line, to the end of the turn. */
  toolsTail: string;
  /** Where the system message goes in the tools turn: inside the head or the tail, at an offset. */
  systemPlace: { in: 'head' | 'tail'; at: number; before: string; after: string };
  /** A tool call. */
  toolCall: ToolCallText;
  /** Between visible assistant text and its first tool call. */
  beforeFirstCall: string;
  /** Between two tool calls. */
  betweenCalls: string;
  /** Before the first result of a run of tool messages (opens its turn). */
  toolResultsOpen: string;
  /** Between two results of one run. */
  betweenToolResults: string;
  /** After the last result of a run (closes its turn). */
  toolResultsClose: string;
  /** What `add_generation_prompt` appends. */
  generationPrompt: string;
  /** What `add_generation_prompt` appends with `enable_thinking` false. */
  generationPromptWithoutThinking: string;
}

const probeUser: ChatMessage = { role: 'user', content: 'probe question' };
const probeSystem = 'probe system text';
const firstName = 'probe_function_one';
const secondName = 'probe_function_two';
const firstKey = 'probe_key_one';
const secondKey = 'probe_key_two';
const firstValue = 'probe value one';
const secondValue = 'probe value two';
const firstResult = 'probe result one';
const secondResult = 'probe result two';

function probeTool(name: string): Tool {
  return {
    type: 'function',
    function: {
      name,
      description: `The ${name} probe.`,
      parameters: { type: 'object', properties: { [firstKey]: { type: 'string' } }, required: [] },
    },
  };
}

function probeCall(name: string, values: Record<string, string>): ToolCall {
  return { id: `call_${name}`, type: 'function', function: { name, arguments: values } };
}

function probeAssistant(content: string, calls: ToolCall[]): ChatMessage {
  const message: ChatMessage = { role: 'assistant', content, reasoning_content: 'probe reasoning' };
  if (calls.length > 0) message.tool_calls = calls;
  return message;
}

function unreadable(what: string, details: { rendered?: string; marker?: string } = {}): DressageError {
  const shown =
    details.rendered === undefined ? '' : `; it renders ${JSON.stringify(details.rendered.slice(-160))}`;
  return new DressageError({
    code: 'failed_precondition',
    message: `cannot read ${what} from it: its probe render does not have the shape of this format${shown}`,
    details: { piece: what, ...details },
  });
}

// `text` with `before` removed from its start and `after` from its end.
function between(text: string, before: string, after: string, what: string): string {
  if (!text.startsWith(before) || !text.endsWith(after) || text.length < before.length + after.length)
    throw unreadable(what, { rendered: text });
  return text.slice(before.length, text.length - after.length);
}

// The literal pieces of `text` around the markers, which appear in this order: markers.length + 1 pieces.
function splitAtMarkers(text: string, markers: readonly string[], what: string): string[] {
  const pieces: string[] = [];
  let from = 0;
  for (const marker of markers) {
    const at = text.indexOf(marker, from);
    if (at === -1) throw unreadable(what, { rendered: text, marker });
    pieces.push(text.slice(from, at));
    from = at + marker.length;
  }
  pieces.push(text.slice(from));
  return pieces;
}

// Where `longer` inserts text into `shorter`: the common prefix and suffix are kept.
function insertion(shorter: string, longer: string, what: string): { at: number; text: string } {
  let prefix = 0;
  while (prefix < shorter.length && shorter[prefix] === longer[prefix]) prefix++;
  let suffix = 0;
  while (
    suffix < shorter.length - prefix &&
    shorter[shorter.length - 1 - suffix] === longer[longer.length - 1 - suffix]
  )
    suffix++;
  if (prefix + suffix !== shorter.length) throw unreadable(what, { rendered: longer });
  return { at: prefix, text: longer.slice(prefix, longer.length - suffix) };
}

function readToolsTurn(
  render: Render,
): Pick<TemplateText, 'toolsHead' | 'toolSeparator' | 'toolsTail' | 'systemPlace'> {
  const conversation = render([probeUser]);
  const first = probeTool('probe_tool_one');
  const second = probeTool('probe_tool_two');
  const firstJson = toTemplateJson(first);
  const secondJson = toTemplateJson(second);
  const one = between(render([probeUser], { tools: [first] }), '', conversation, 'the tools turn');
  const [toolsHead, toolsTail] = splitAtMarkers(one, [firstJson], 'the tool list') as [string, string];
  const two = between(render([probeUser], { tools: [first, second] }), '', conversation, 'the tools turn');
  const toolSeparator = between(
    two,
    `${toolsHead}${firstJson}`,
    `${secondJson}${toolsTail}`,
    'the tool separator',
  );
  const withSystem = between(
    render([{ role: 'system', content: probeSystem }, probeUser], { tools: [first] }),
    '',
    conversation,
    'the tools turn with a system message',
  );
  const inserted = insertion(one, withSystem, 'the system message in the tools turn');
  const [before, after] = splitAtMarkers(
    inserted.text,
    [probeSystem],
    'the system message in the tools turn',
  ) as [string, string];
  const inTail = inserted.at > toolsHead.length;
  if (inTail && inserted.at < toolsHead.length + firstJson.length)
    throw unreadable('the system message in the tools turn', { rendered: withSystem });
  const systemPlace = inTail
    ? { in: 'tail' as const, at: inserted.at - toolsHead.length - firstJson.length, before, after }
    : { in: 'head' as const, at: inserted.at, before, after };
  return { toolsHead, toolSeparator, toolsTail, systemPlace };
}

// The text a tool call adds to an assistant turn ending in `content`: the render with the call
// minus the render without it, both ending with the turn end.
function callsText(render: Render, content: string, calls: ToolCall[], what: string): string {
  const closing = `${turnEnd}\n`;
  const without = render([probeUser, probeAssistant(content, [])]);
  const withCalls = render([probeUser, probeAssistant(content, calls)]);
  if (!without.endsWith(closing)) throw unreadable(what, { rendered: without });
  return between(withCalls, without.slice(0, -closing.length), closing, what);
}

function readToolCall(render: Render, format: 'json' | 'xml'): ToolCallText {
  const one = { [firstKey]: firstValue };
  const two = { [firstKey]: firstValue, [secondKey]: secondValue };
  const withOne = callsText(render, '', [probeCall(firstName, one)], 'a tool call');
  if (format === 'json') {
    const [open, beforeArguments, close] = splitAtMarkers(
      withOne,
      [firstName, toTemplateJson(one)],
      'a tool call',
    );
    return { format, open: open!, beforeArguments: beforeArguments!, close: close! };
  }
  const withNone = callsText(render, '', [probeCall(firstName, {})], 'a tool call without parameters');
  const withTwo = callsText(render, '', [probeCall(firstName, two)], 'a tool call with two parameters');
  const [open, beforeFirstParameter, beforeValue, afterLastParameter] = splitAtMarkers(
    withOne,
    [firstName, firstKey, firstValue],
    'a tool call',
  ) as [string, string, string, string];
  const [, withoutParameters] = splitAtMarkers(withNone, [firstName], 'a tool call without parameters');
  const pieces = splitAtMarkers(
    withTwo,
    [firstName, firstKey, firstValue, secondKey],
    'a tool call with two parameters',
  );
  return {
    format,
    open,
    withoutParameters: withoutParameters!,
    beforeFirstParameter,
    beforeValue,
    betweenParameters: pieces[3]!,
    afterLastParameter,
  };
}

type Render = (messages: readonly ChatMessage[], options?: RenderOptions) => string;

/**
 * Reads the literal text of a Qwen-style chat template (ChatML turns, tools listed as JSON lines in
 * the system turn, tool results inside user turns) by rendering probe conversations and cutting
 * them at known markers. `format` is the tool-call format the renderer family writes.
 *
 * @throws DressageError `failed_precondition` when a probe does not render the expected shape.
 */
export function readTemplateText(template: ChatRenderer, format: 'json' | 'xml'): TemplateText {
  const render: Render = (messages, options = {}) => template.render(messages, options);
  const toolCall = readToolCall(render, format);
  const callText = (name: string) =>
    toolCall.format === 'json'
      ? `${toolCall.open}${name}${toolCall.beforeArguments}{}${toolCall.close}`
      : `${toolCall.open}${name}${toolCall.withoutParameters}`;
  const firstCall = callText(firstName);
  const secondCall = callText(secondName);
  const twoCalls = callsText(
    render,
    'probe content',
    [probeCall(firstName, {}), probeCall(secondName, {})],
    'two tool calls after text',
  );
  const [beforeFirstCall, betweenCalls, rest] = splitAtMarkers(
    twoCalls,
    [firstCall, secondCall],
    'two tool calls',
  );
  if (rest !== '') throw unreadable('two tool calls', { rendered: twoCalls });

  const caller = probeAssistant('', [probeCall(firstName, {}), probeCall(secondName, {})]);
  const base = render([probeUser, caller]);
  const results = between(
    render([
      probeUser,
      caller,
      { role: 'tool', content: firstResult, tool_call_id: `call_${firstName}` },
      { role: 'tool', content: secondResult, tool_call_id: `call_${secondName}` },
    ]),
    base,
    '',
    'tool results',
  );
  const [toolResultsOpen, betweenToolResults, toolResultsClose] = splitAtMarkers(
    results,
    [firstResult, secondResult],
    'tool results',
  ) as [string, string, string];

  const conversation = render([probeUser]);
  return {
    ...readToolsTurn(render),
    toolCall,
    beforeFirstCall: beforeFirstCall!,
    betweenCalls: betweenCalls!,
    toolResultsOpen,
    betweenToolResults,
    toolResultsClose,
    generationPrompt: between(
      render([probeUser], { addGenerationPrompt: true }),
      conversation,
      '',
      'the generation prompt',
    ),
    generationPromptWithoutThinking: between(
      render([probeUser], { addGenerationPrompt: true, enableThinking: false }),
      conversation,
      '',
      'the generation prompt without thinking',
    ),
  };
}

/** The system turn with tools, written with the template's text. */
export function toolsTurnText(text: TemplateText, tools: readonly Tool[], system: string | null): string {
  let list = '';
  for (let index = 0; index < tools.length; index++) {
    if (index > 0) list += text.toolSeparator;
    list += toTemplateJson(tools[index]);
  }
  if (system === null) return `${text.toolsHead}${list}${text.toolsTail}`;
  const { at, before, after } = text.systemPlace;
  const placed = `${before}${system}${after}`;
  if (text.systemPlace.in === 'head')
    return `${text.toolsHead.slice(0, at)}${placed}${text.toolsHead.slice(at)}${list}${text.toolsTail}`;
  return `${text.toolsHead}${list}${text.toolsTail.slice(0, at)}${placed}${text.toolsTail.slice(at)}`;
}

/** One run of tool results (consecutive tool messages) written with the template's text. */
export function toolResultText(text: TemplateText, opens: boolean, content: string, closes: boolean): string {
  return `${opens ? text.toolResultsOpen : text.betweenToolResults}${content}${closes ? text.toolResultsClose : ''}`;
}

// A parameter value as the template prints it: strings as they are, everything else as JSON (the
// tool-call parser reads JSON back; Python's template would print True/None for scalars).
function parameterValue(value: unknown): string {
  return typeof value === 'string' ? value : toTemplateJson(value);
}

/**
 * One tool call in the template's format. Arguments are decoded from JSON first, as serving engines
 * do before templating; JSON-format calls print them back as template JSON (a string that is not
 * JSON is printed as it is), XML-format calls need an object.
 *
 * @throws DressageError `invalid_argument` for XML-format arguments that are not a JSON object.
 */
export function toolCallText(text: ToolCallText, call: ToolCall): string {
  const values = toolCallArguments(call);
  const name = call.function.name;
  if (text.format === 'json') {
    const argumentsText = typeof values === 'string' ? values : toTemplateJson(values);
    return `${text.open}${name}${text.beforeArguments}${argumentsText}${text.close}`;
  }
  if (typeof values !== 'object' || values === null || Array.isArray(values))
    throw argumentsNotAnObject(call);
  let written = `${text.open}${name}`;
  let count = 0;
  for (const [key, value] of Object.entries(values)) {
    if (value === undefined) continue;
    written += `${count === 0 ? text.beforeFirstParameter : text.betweenParameters}${key}${text.beforeValue}${parameterValue(value)}`;
    count++;
  }
  return written + (count === 0 ? text.withoutParameters : text.afterLastParameter);
}
