import { createHash } from 'node:crypto';
import { type ChatMessage, DressageError, type Tool } from '@dressage/protocol';
import {
  type ChatRenderer,
  createFixedRenderer,
  createSnapshotRenderer,
  loadTokenizer,
  readChatTemplateFile,
  TitoEncoder,
  type TitoTextEncoder,
  type TitoTokenizer,
} from '@dressage/tito';
import { rendersNoToolsLikeEmptyTools } from '@dressage/tito/internal';
import type { ProxyConfig } from './config.js';

/**
 * What the proxy needs from tokenization: rendering for routing, full and incremental (TITO)
 * encoding, and plain text encoding. A thin seam over `@dressage/tito`.
 */
export interface PromptTokenizer {
  /** A name for `/integration/capabilities` (`tokenizer_id`). */
  readonly tokenizerId: string;
  /** SHA-256 of the chat template used for rendering, or null. */
  readonly chatTemplateFingerprint: string | null;
  /** True when `tools: null` and `tools: []` render identically (then they are not a tools change). */
  readonly noToolsEqualsEmptyTools: boolean;
  /** Renders messages (routing compares these strings). */
  render(
    messages: readonly ChatMessage[],
    tools: readonly Tool[] | null,
    addGenerationPrompt: boolean,
  ): string;
  /**
   * What `render(messages, tools, addGenerationPrompt)` adds to the render of
   * `messages.slice(0, from)` (`messages[from - 1]` an assistant turn), rendering only the messages
   * from `from` on; null when the renderer cannot continue a render (see `ChatRenderer.renderFrom`).
   */
  renderFrom(
    messages: readonly ChatMessage[],
    from: number,
    tools: readonly Tool[] | null,
    addGenerationPrompt: boolean,
  ): string | null;
  /**
   * Renders with the generation prompt and encodes the whole prompt. `rendered`, when the caller
   * already has it, is `render(messages, tools, true)` and is not rendered again.
   */
  encodeFull(messages: readonly ChatMessage[], tools: readonly Tool[] | null, rendered?: string): Int32Array;
  /**
   * The context ids that extend the prefix (ids covering `baseMessages`, of which the encoder needs
   * the count and the last) to the prompt of `messages`.
   * @throws when the request cannot be encoded incrementally.
   */
  encodeIncremental(
    prefix: { length: number; lastId: number },
    baseMessages: readonly ChatMessage[],
    messages: readonly ChatMessage[],
  ): Int32Array;
  /** Encodes plain text without special-token handling beyond the vocabulary. */
  encodeText(text: string): Int32Array;
}

// Texts up to this length are memoized: the generation prompt, turn separators and other fixed
// pieces repeat on every request, and the tokenizer's per-call cost dwarfs a map lookup.
const memoTextLength = 256;
const memoEntries = 4096;

/**
 * The tokenizer's encoding with a bounded memo of short texts. Callers get copies, never the memo.
 * A plain object rather than a wrapping Proxy: the encoder calls `encode` several times a request.
 */
function memoizeEncode(tokenizer: TitoTokenizer): TitoTextEncoder {
  const memo = new Map<string, Int32Array>();
  return {
    encode(text: string): Int32Array {
      if (text.length > memoTextLength) return tokenizer.encode(text);
      let ids = memo.get(text);
      if (ids === undefined) {
        ids = tokenizer.encode(text);
        if (memo.size >= memoEntries) memo.clear();
        memo.set(text, ids);
      }
      return ids.slice();
    },
    requireTokenId: (token: string) => tokenizer.requireTokenId(token),
  };
}

// Whole prompts by rendered text: the samples of a rollout group open with the same prompt (system,
// tools, task), so all but the first skip tokenizing it. Bounded by the characters of the keys.
const promptMemoCharacters = 8_000_000;

/** A bounded least-recently-used map from prompt text to its ids. */
class PromptMemo {
  readonly #entries = new Map<string, Int32Array>();
  #characters = 0;

  get(text: string): Int32Array | undefined {
    const ids = this.#entries.get(text);
    if (ids !== undefined) {
      this.#entries.delete(text);
      this.#entries.set(text, ids);
    }
    return ids;
  }

  set(text: string, ids: Int32Array): void {
    if (text.length > promptMemoCharacters / 8 || this.#entries.has(text)) return;
    this.#entries.set(text, ids);
    this.#characters += text.length;
    for (const key of this.#entries.keys()) {
      if (this.#characters <= promptMemoCharacters) break;
      this.#entries.delete(key);
      this.#characters -= key.length;
    }
  }
}

/** Builds a {@link PromptTokenizer} from a tito tokenizer and renderer. */
export function createPromptTokenizer(options: {
  tokenizer: TitoTokenizer;
  renderer: ChatRenderer;
  tokenizerId: string;
  chatTemplate: string | null;
}): PromptTokenizer {
  const { renderer } = options;
  const tokenizer = memoizeEncode(options.tokenizer);
  const encoder = new TitoEncoder({ tokenizer, renderer });
  const prompts = new PromptMemo();
  return {
    tokenizerId: options.tokenizerId,
    chatTemplateFingerprint:
      options.chatTemplate === null ? null : createHash('sha256').update(options.chatTemplate).digest('hex'),
    noToolsEqualsEmptyTools: rendersNoToolsLikeEmptyTools(renderer),
    render: (messages, tools, addGenerationPrompt) =>
      renderer.render(messages, { tools, addGenerationPrompt }),
    renderFrom: (messages, from, tools, addGenerationPrompt) =>
      renderer.renderFrom?.(messages, from, { tools, addGenerationPrompt }) ?? null,
    encodeFull: (messages, tools, rendered) => {
      // A full encoding is the encoding of exactly this rendered text (TitoEncoder.encodeFull), so
      // equal texts have equal ids and the caller's render is not done again.
      const text = rendered ?? renderer.render(messages, { tools, addGenerationPrompt: true });
      let ids = prompts.get(text);
      if (ids === undefined) {
        ids = tokenizer.encode(text);
        prompts.set(text, ids.slice());
      }
      return ids.slice();
    },
    // The session's ids stay in its token buffer: the encoder reads only a prefix's length and last id.
    encodeIncremental: (prefix, baseMessages, messages) =>
      encoder.encodeIncremental({
        prefixIds: { length: prefix.length, [prefix.length - 1]: prefix.lastId },
        baseMessages,
        messages,
      }).ids,
    encodeText: (text) => tokenizer.encode(text),
  };
}

/** The tokenizer and the renderer in force for a proxy configuration. */
export interface PromptRendering {
  tokenizer: TitoTokenizer;
  /** What every prompt is rendered with (full encodes, routing, TITO deltas). */
  renderer: ChatRenderer;
  /** The Jinja source of the template in force. */
  chatTemplate: string;
  /** Where it came from: the `--chat-template` file, or the model directory. */
  templateSource: string;
}

/**
 * Loads the tokenizer of `config.tokenizerPath` and the template in force (`config.chatTemplate`
 * when given, else the model directory's), and picks the renderer: the template itself in snapshot
 * mode and for `qwen3_6`; the fixed `qwen3_5` or `qwen3` renderer in TITO mode, its text read from
 * the template and checked against it. The family of `--token-build-model` (`--tito-model` in TITO
 * mode) must reproduce the template in both modes, since it also names the tool-call and mask
 * formats.
 *
 * @throws DressageError `failed_precondition` naming the model, the template and the first differing
 *   text when the family's renderer cannot reproduce the template; `not_found` for a missing
 *   template file.
 */
export async function loadPromptRendering(
  config: Pick<
    ProxyConfig,
    'tokenizerPath' | 'chatTemplate' | 'tokenBuildMode' | 'tokenBuildModel' | 'titoModel'
  >,
): Promise<PromptRendering> {
  const tokenizer = await loadTokenizer(config.tokenizerPath);
  const chatTemplate =
    config.chatTemplate === null ? tokenizer.chatTemplate : await readChatTemplateFile(config.chatTemplate);
  const templateSource = config.chatTemplate ?? `of the model directory ${config.tokenizerPath}`;
  if (chatTemplate === null) {
    throw new DressageError({
      code: 'failed_precondition',
      message: `${config.tokenizerPath} has no chat template (tokenizer_config.json chat_template or chat_template.jinja); give one with --chat-template`,
      details: { path: config.tokenizerPath },
    });
  }
  const tito = config.tokenBuildMode === 'tito';
  const model = tito ? config.titoModel : config.tokenBuildModel;
  let fixed: ChatRenderer | null = null;
  if (model !== 'qwen3_6') {
    try {
      fixed = createFixedRenderer(model, {
        chatTemplate,
        templateName: templateSource,
        bosToken: tokenizer.bosToken,
        eosToken: tokenizer.eosToken,
      });
    } catch (error) {
      if (!DressageError.isInstance(error) || error.code !== 'failed_precondition') throw error;
      const flag =
        tito && config.titoModel !== config.tokenBuildModel ? '--tito-model' : '--token-build-model';
      throw new DressageError({
        code: 'failed_precondition',
        message: `${flag} ${model} cannot render the prompts of the chat template in force (pass the model's renderer family, or --chat-template): ${error.message}`,
        cause: error,
        details: { ...error.details, model },
      });
    }
  }
  const renderer =
    tito && fixed !== null
      ? fixed
      : createSnapshotRenderer(tokenizer, {
          chatTemplate,
          // TITO over the template itself keeps every turn's reasoning, as the fixed renderers do.
          ...(tito ? { variables: { preserve_thinking: true } } : {}),
        });
  return { tokenizer, renderer, chatTemplate, templateSource };
}

/** Loads the tokenizer and renderer in force (see {@link loadPromptRendering}) as a {@link PromptTokenizer}. */
export async function loadPromptTokenizer(config: ProxyConfig): Promise<PromptTokenizer> {
  const { tokenizer, renderer, chatTemplate } = await loadPromptRendering(config);
  return createPromptTokenizer({ tokenizer, renderer, tokenizerId: config.tokenizerPath, chatTemplate });
}
