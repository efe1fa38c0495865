import type { ChatMessage, Tool } from '@dressage/protocol';

/** Options of one render. */
export interface RenderOptions {
  /** The tools offered to the model; null, undefined and `[]` all mean none for the fixed renderers. */
  tools?: readonly Tool[] | null;
  /** Append the prompt that opens the assistant's turn. Default false. */
  addGenerationPrompt?: boolean;
  /** False asks a thinking model to skip reasoning (an empty think block). Default true. */
  enableThinking?: boolean;
}

/** Something that turns messages into prompt text: a fixed renderer or a model's Jinja template. */
export interface ChatRenderer {
  /** A short name for logs: `qwen3_5`, `qwen3`, `chatml` or `chat_template`. */
  readonly name: string;
  /** The text that closes every turn (the model's stop token), e.g. `<|im_end|>`. */
  readonly endOfTurn: string;
  /**
   * True when the generation prompt does not depend on the conversation before it, so TITO can
   * diff it against a small dummy context instead of the whole history.
   */
  readonly generationPromptIsContextFree: boolean;
  /** Renders messages to prompt text. */
  render(messages: readonly ChatMessage[], options?: RenderOptions): string;
  /**
   * Optional, for renderers whose text only grows when messages follow an assistant turn: what
   * `render(messages, options)` adds to `render(messages.slice(0, from))`, rendering only
   * `messages[from]` onwards. Null when `messages[from - 1]` is not an assistant message, or when the
   * earlier text would not stay as it was (`qwen3` without preserved reasoning: a new query, or a
   * last turn without reasoning whose empty think block goes). A caller
   * that already has the text of an earlier conversation whose messages {@link rendersAlike} these
   * extends it instead of rendering the whole history again, so such renderers read no message
   * fields beyond the ones `rendersAlike` compares.
   */
  renderFrom?(messages: readonly ChatMessage[], from: number, options?: RenderOptions): string | null;
  /**
   * The context against which TITO renders one appended group (consecutive tool results, or one
   * user message) before diffing: it must make the group render exactly as it would after a real
   * history ending with an assistant turn.
   */
  dummyContext(group: readonly ChatMessage[]): ChatMessage[];
}

/** The fixed renderer families. */
export const rendererFamilies = ['qwen3_5', 'qwen3', 'chatml'] as const;

/** One of {@link rendererFamilies}. */
export type RendererFamily = (typeof rendererFamilies)[number];
