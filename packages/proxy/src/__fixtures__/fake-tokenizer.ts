import type { ChatMessage } from '@dressage/protocol';
import type { ChatRenderer, TitoTokenizer } from '@dressage/tito';
import { createPromptTokenizer, type PromptTokenizer } from '../prompt-tokenizer.js';

/** Text of a message for the fake template. */
function text(message: ChatMessage): string {
  const content = message.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content.map((part) => (typeof part.text === 'string' ? part.text : '')).join('');
  return '';
}

/**
 * The reference's fake template: `<role>content` per message, generation prompt `<assistant>`, one
 * token per character. `tools` are not rendered, so tool changes are invisible to rendering.
 */
export const fakeRenderer: ChatRenderer = {
  name: 'fake',
  endOfTurn: '<eot>',
  generationPromptIsContextFree: true,
  render(messages, options = {}) {
    let out = '';
    for (const message of messages) {
      if (!['system', 'user', 'assistant', 'tool'].includes(message.role))
        throw new Error(`unknown role ${message.role}`);
      out += `<${message.role}>${text(message)}`;
    }
    return options.addGenerationPrompt ? `${out}<assistant>` : out;
  },
  renderFrom(messages, from, options = {}) {
    if (from < 1 || messages[from - 1]?.role !== 'assistant') return null;
    return this.render(messages.slice(from), options);
  },
  dummyContext() {
    return [];
  },
};

/** Character-level encoding: one token per UTF-16 code unit. */
export function encodeCharacters(value: string): number[] {
  return Array.from(value, (character) => character.charCodeAt(0));
}

/** Inverse of {@link encodeCharacters}. */
export function decodeCharacters(ids: number[]): string {
  return String.fromCharCode(...ids);
}

/** A character-level stand-in for a Hugging Face tokenizer (TITO only calls these members). */
const fakeTitoTokenizer = {
  encode: (value: string) => Int32Array.from(encodeCharacters(value)),
  decode: (ids: ArrayLike<number>) => decodeCharacters(Array.from(ids)),
  tokenId: () => 1,
  requireTokenId: () => 1,
} as unknown as TitoTokenizer;

/** The fake tokenizer of the reference's examples, through the real TITO encoder. */
export function createFakePromptTokenizer(): PromptTokenizer {
  return createPromptTokenizer({
    tokenizer: fakeTitoTokenizer,
    renderer: fakeRenderer,
    tokenizerId: 'fake-characters',
    chatTemplate: null,
  });
}
