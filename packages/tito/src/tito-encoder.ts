import { type ChatMessage, CONTEXT_TOKEN_VERSION } from '@dressage/protocol';
import { TitoIncrementalError } from './errors.js';
import { firstMismatch } from './messages.js';
import type { ChatRenderer, RenderOptions } from './renderers/renderer.js';
import { startsWithText } from './text-prefix.js';
import type { TitoTokenizer } from './tokenizer.js';

/** What one incremental step appends before the model's next output. */
export interface ContextDelta {
  /** The ids to concatenate after the prefix: turn separator, appended groups, generation prompt. */
  ids: Int32Array;
  /** Loss mask of those ids: all 0, they are context, not model output. */
  mask: Uint8Array;
  /** Weight version of every context id: `"-1"`. */
  version: typeof CONTEXT_TOKEN_VERSION;
  /** The text those ids encode (the rendered delta), for logs and checks. */
  text: string;
  /** How many appended groups were rendered (tool runs and user messages). */
  groupCount: number;
}

/** One incremental request. */
export interface IncrementalRequest {
  /**
   * The lineage's ids so far, ending with the model's own output. Only its length and its last id
   * are read: a caller that keeps the ids elsewhere may pass `{ length, [length - 1]: lastId }`.
   */
  prefixIds: ArrayLike<number>;
  /** The messages the prefix covers: the previous request plus the assistant reply. */
  baseMessages: readonly ChatMessage[];
  /** The new request: `baseMessages` followed by appended `user` and `tool` messages. */
  messages: readonly ChatMessage[];
  /** Passed to the generation prompt. Default true. */
  enableThinking?: boolean;
}

/**
 * What the encoder needs of a tokenizer: a {@link TitoTokenizer}, or a wrapper of one (a memo of
 * short texts, say) that encodes exactly as it does.
 */
export type TitoTextEncoder = Pick<TitoTokenizer, 'encode' | 'requireTokenId'>;

/** Options of a full (non-incremental) encoding. */
export interface FullEncodeOptions extends RenderOptions {}

function groupAppended(appended: readonly ChatMessage[], offset: number): ChatMessage[][] {
  const groups: ChatMessage[][] = [];
  for (let index = 0; index < appended.length; index++) {
    const message = appended[index]!;
    const role = (message as { role?: unknown }).role;
    if (role === 'tool') {
      const last = groups.at(-1);
      if (last?.[0]?.role === 'tool') last.push(message);
      else groups.push([message]);
    } else if (role === 'user') {
      groups.push([message]);
    } else if (role === 'system' || role === 'assistant') {
      throw new TitoIncrementalError({
        reason: 'appended_role_not_allowed',
        message: `Appended message ${offset + index} is ${role}: only user and tool messages can be appended incrementally`,
        details: { index: offset + index, role },
      });
    } else {
      throw new TitoIncrementalError({
        reason: 'unknown_role',
        code: 'invalid_argument',
        message: `Appended message ${offset + index} has unknown role ${JSON.stringify(role)}`,
        details: { index: offset + index, role },
      });
    }
  }
  return groups;
}

function renderDiff(before: string, after: string, what: string): string {
  if (!startsWithText(after, before)) {
    throw new TitoIncrementalError({
      reason: 'render_diff_not_prefix',
      message: `Rendering ${what} changed the text before it, so its delta is not a suffix`,
      details: { what },
    });
  }
  return after.slice(before.length);
}

/**
 * Token-In-Token-Out: extends a lineage by encoding only what was appended, so the ids the model
 * produced are never re-tokenized. Also offers the full render-and-encode path used as fallback.
 *
 * @example
 * ```ts
 * const encoder = new TitoEncoder({ tokenizer, renderer: createFixedRenderer('qwen3_5') });
 * const prompt = encoder.encodeFull(messages, { tools, addGenerationPrompt: true });
 * // … the model answers with outputIds; the agent appends tool results …
 * const delta = encoder.encodeIncremental({
 *   prefixIds: concatTypedArrays([prompt, outputIds]),
 *   baseMessages: [...messages, assistantReply],
 *   messages: nextRequestMessages,
 * });
 * ```
 */
export class TitoEncoder {
  /** The tokenizer that encodes every delta. */
  readonly tokenizer: TitoTextEncoder;
  /** The renderer whose text the deltas are diffs of. */
  readonly renderer: ChatRenderer;
  readonly #endOfTurnId: number;
  readonly #separator: Int32Array;

  constructor(options: { tokenizer: TitoTextEncoder; renderer: ChatRenderer }) {
    this.tokenizer = options.tokenizer;
    this.renderer = options.renderer;
    this.#endOfTurnId = options.tokenizer.requireTokenId(options.renderer.endOfTurn);
    this.#separator = options.tokenizer.encode('\n');
  }

  /** Renders messages with this encoder's renderer. */
  render(messages: readonly ChatMessage[], options: RenderOptions = {}): string {
    return this.renderer.render(messages, options);
  }

  /**
   * The fallback: renders the whole conversation and encodes it. Use it for a new lineage, after a
   * segment boundary, or when {@link encodeIncremental} throws.
   */
  encodeFull(messages: readonly ChatMessage[], options: FullEncodeOptions = {}): Int32Array {
    return this.tokenizer.encode(this.renderer.render(messages, options));
  }

  /**
   * The ids to append after `prefixIds` for the new request: `\n` when the prefix ends with the
   * turn-end token, then each appended group (a run of tool results, or one user message) rendered
   * against a dummy context and string-diffed, then the generation prompt.
   *
   * @throws TitoIncrementalError when the request cannot be encoded incrementally (history not
   *   append-only, a system or assistant message appended, an unknown role, a render diff that is
   *   not a suffix, an empty prefix). The caller then encodes the whole prompt and starts a segment.
   */
  encodeIncremental(request: IncrementalRequest): ContextDelta {
    const { prefixIds, baseMessages, messages } = request;
    if (prefixIds.length === 0) {
      throw new TitoIncrementalError({
        reason: 'empty_prefix',
        message: 'There are no prefix ids to extend: encode the whole prompt instead',
      });
    }
    const mismatch = firstMismatch(baseMessages, messages, 'content');
    if (mismatch !== -1) {
      throw new TitoIncrementalError({
        reason: 'history_not_append_only',
        message: `The request does not repeat base message ${mismatch}: history was rewritten, not appended to`,
        details: { index: mismatch, baseLength: baseMessages.length, requestLength: messages.length },
      });
    }
    const groups = groupAppended(messages.slice(baseMessages.length), baseMessages.length);

    const pieces: Int32Array[] = [];
    let text = '';
    // The model stops at the turn-end token; the template writes it followed by a newline.
    if (prefixIds[prefixIds.length - 1] === this.#endOfTurnId) {
      pieces.push(this.#separator);
      text += '\n';
    }
    for (const group of groups) {
      const context = this.renderer.dummyContext(group);
      const before = this.renderer.render(context);
      const after = this.renderer.render([...context, ...group]);
      const delta = renderDiff(before, after, `appended ${group[0]!.role} group`);
      pieces.push(this.tokenizer.encode(delta));
      text += delta;
    }
    const promptDelta = this.#generationPromptDelta(groups.at(-1) ?? [], messages, request.enableThinking);
    pieces.push(this.tokenizer.encode(promptDelta));
    text += promptDelta;

    const ids = concatIds(pieces);
    return {
      ids,
      mask: new Uint8Array(ids.length),
      version: CONTEXT_TOKEN_VERSION,
      text,
      groupCount: groups.length,
    };
  }

  // The generation prompt is diffed on the smallest context that gives the right answer: a dummy
  // context for renderers that promise it does not depend on history, the full request otherwise.
  #generationPromptDelta(
    lastGroup: readonly ChatMessage[],
    messages: readonly ChatMessage[],
    enableThinking: boolean | undefined,
  ): string {
    const context = this.renderer.generationPromptIsContextFree
      ? [...this.renderer.dummyContext(lastGroup), ...lastGroup]
      : messages;
    const options: RenderOptions = enableThinking === undefined ? {} : { enableThinking };
    const without = this.renderer.render(context, { ...options, addGenerationPrompt: false });
    const withPrompt = this.renderer.render(context, { ...options, addGenerationPrompt: true });
    return renderDiff(without, withPrompt, 'the generation prompt');
  }
}

function concatIds(pieces: readonly Int32Array[]): Int32Array {
  let length = 0;
  for (const piece of pieces) length += piece.length;
  const ids = new Int32Array(length);
  let offset = 0;
  for (const piece of pieces) {
    ids.set(piece, offset);
    offset += piece.length;
  }
  return ids;
}
