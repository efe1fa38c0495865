import { type ChatMessage, DressageError, type Tool } from '@dressage/protocol';
import type { ChatRenderer, RenderOptions } from './renderer.js';

function call(id: string, name: string, values: Record<string, unknown>) {
  return { id, type: 'function' as const, function: { name, arguments: values } };
}

const checkTools: Tool[] = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file — ünïcode too.',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
  { type: 'function', function: { name: 'list_files', parameters: { type: 'object', properties: {} } } },
];

// Conversations that reach every piece a fixed renderer writes: system text (plain, padded, empty),
// reasoning before and after the last query, text with and without calls, one and several calls
// with zero, one and several parameters (strings, numbers, objects, arrays, a JSON-string form),
// runs of one and several tool results, raw `<think>` content, and user text with outer whitespace.
// Assistant text carries no spaces next to its outer newlines: @huggingface/jinja's strip ignores
// its characters argument, so such text cannot be compared there.
const checkConversations: readonly { name: string; messages: ChatMessage[] }[] = [
  {
    name: 'an agent loop',
    messages: [
      { role: 'system', content: 'Use the tools.' },
      { role: 'user', content: 'First question?' },
      { role: 'assistant', content: 'First answer.', reasoning_content: 'Easy one.' },
      { role: 'user', content: 'Read a.txt and list files.' },
      {
        role: 'assistant',
        content: '',
        reasoning_content: 'Two calls.',
        tool_calls: [
          call('call_1', 'read_file', { path: 'a.txt', limit: 3, options: { deep: [1, 'x'] } }),
          call('call_2', 'list_files', {}),
        ],
      },
      { role: 'tool', content: 'alpha\nbeta', tool_call_id: 'call_1' },
      { role: 'tool', content: 'a.txt\nb.txt', tool_call_id: 'call_2' },
      {
        role: 'assistant',
        content: 'Reading b too.',
        reasoning_content: '',
        tool_calls: [
          {
            id: 'call_3',
            type: 'function',
            function: { name: 'read_file', arguments: '{"path":"b.txt","ratio":1.5}' },
          },
        ],
      },
      { role: 'tool', content: 'gamma', tool_call_id: 'call_3' },
      { role: 'assistant', content: 'Done: alpha, gamma.', reasoning_content: 'All read.' },
    ],
  },
  { name: 'one user message', messages: [{ role: 'user', content: 'Hello there.' }] },
  {
    name: 'system and padded user text',
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: '  padded question \n' },
    ],
  },
  {
    name: 'empty system text',
    messages: [
      { role: 'system', content: '' },
      { role: 'user', content: 'Go.' },
    ],
  },
  {
    name: 'raw reasoning in the content',
    messages: [
      { role: 'user', content: 'Think aloud.' },
      { role: 'assistant', content: '<think>\nHmm.\n</think>\n\nSure.' },
      { role: 'user', content: 'Again.' },
    ],
  },
];

const checkOptions: readonly RenderOptions[] = [
  { tools: checkTools, addGenerationPrompt: true },
  { tools: checkTools, addGenerationPrompt: true, enableThinking: false },
  { tools: checkTools },
  { addGenerationPrompt: true },
  {},
];

/** Where a renderer first departs from the template: the probe, the options and the two texts there. */
export interface RenderDifference {
  conversation: string;
  /** The render options, tools by name. */
  options: string;
  offset: number;
  /** The template's text from a little before the difference. */
  template: string;
  /** The renderer's text from the same place. */
  renderer: string;
}

function excerpt(text: string, offset: number): string {
  return text.slice(Math.max(0, offset - 24), offset + 56);
}

/**
 * Renders the check conversations with both and returns the first difference, or null when the
 * renderer reproduces the template byte for byte on all of them.
 */
export function firstRenderDifference(
  renderer: ChatRenderer,
  template: ChatRenderer,
): RenderDifference | null {
  for (const { name, messages } of checkConversations) {
    for (const options of checkOptions) {
      const expected = template.render(messages, options);
      const actual = renderer.render(messages, options);
      if (expected === actual) continue;
      let offset = 0;
      while (offset < expected.length && expected[offset] === actual[offset]) offset++;
      return {
        conversation: name,
        options: JSON.stringify({ ...options, tools: options.tools?.map((tool) => tool.function.name) }),
        offset,
        template: excerpt(expected, offset),
        renderer: excerpt(actual, offset),
      };
    }
  }
  return null;
}

/**
 * Throws unless the renderer reproduces the template on the check conversations. `label` names the
 * template in the message (`the chat template PATH`).
 *
 * @throws DressageError `failed_precondition` naming the renderer, the template and the first
 *   differing text.
 */
export function assertRendersLikeTemplate(
  renderer: ChatRenderer,
  template: ChatRenderer,
  label: string,
  templateName: string | null,
): void {
  const difference = firstRenderDifference(renderer, template);
  if (difference === null) return;
  throw new DressageError({
    code: 'failed_precondition',
    message:
      `The ${renderer.name} renderer cannot reproduce ${label}: ` +
      `on "${difference.conversation}" (${difference.options}) at character ${difference.offset} the template renders ` +
      `${JSON.stringify(difference.template)} where the renderer writes ${JSON.stringify(difference.renderer)}`,
    details: { renderer: renderer.name, template: templateName, difference },
  });
}
