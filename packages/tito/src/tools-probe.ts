import type { ChatMessage } from '@dressage/protocol';
import type { ChatRenderer } from './renderers/renderer.js';

const probeConversations: readonly (readonly ChatMessage[])[] = [
  [{ role: 'user', content: 'probe' }],
  [
    { role: 'system', content: 'probe system' },
    { role: 'user', content: 'probe' },
  ],
  [
    { role: 'user', content: 'probe' },
    { role: 'assistant', content: 'answer' },
  ],
  [
    { role: 'system', content: 'probe system' },
    { role: 'user', content: 'probe' },
    {
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }],
    },
    { role: 'tool', content: 'result', tool_call_id: 'c1' },
  ],
];

/**
 * True when the renderer renders `tools: null` and `tools: []` identically on four probe
 * conversations, in which case a change between them is not a tools change (§1.8).
 */
export function rendersNoToolsLikeEmptyTools(renderer: ChatRenderer): boolean {
  return probeConversations.every(
    (messages) =>
      renderer.render(messages, { tools: null, addGenerationPrompt: true }) ===
      renderer.render(messages, { tools: [], addGenerationPrompt: true }),
  );
}
