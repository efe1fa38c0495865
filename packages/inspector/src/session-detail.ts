import { defaultView, type InspectedSession, type SegmentView, segmentsOfView } from './model.js';
import type { SessionDetail, SessionExport, TokenPage, TokenRow } from './views/api-types.js';
import { classifyTokens, versionSpans } from './views/token-kinds.js';

/** Anything that decodes token ids to text, such as `@dressage/tito`'s `TitoTokenizer`. */
export interface TokenTextDecoder {
  decode(ids: ArrayLike<number>): string;
}

/** Decodes ids one at a time (so every token shows its own text), caching each id's text. */
export class TokenDecoder {
  readonly #decoder: TokenTextDecoder;
  readonly #cache = new Map<number, string>();

  constructor(decoder: TokenTextDecoder) {
    this.#decoder = decoder;
  }

  /** The text of one id. */
  text(id: number): string {
    let text = this.#cache.get(id);
    if (text === undefined) {
      text = this.#decoder.decode([id]);
      this.#cache.set(id, text);
    }
    return text;
  }
}

const allViews: SegmentView[] = ['lineage', 'timeline', 'sample'];

function viewsOf(session: InspectedSession): SegmentView[] {
  return allViews.filter((view) => session.segments.some((segment) => segment.view === view));
}

/** Resolves a requested view, falling back to the session's default. */
export function resolveView(session: InspectedSession, requested: string | null): SegmentView {
  const views = viewsOf(session);
  return views.find((view) => view === requested) ?? defaultView(session.segments);
}

/** The session view's payload: segments without their tokens. */
export function sessionDetail(session: InspectedSession, view: SegmentView): SessionDetail {
  return {
    session: {
      id: session.id,
      sessionId: session.sessionId,
      instanceId: session.instanceId,
      trajectoryId: session.trajectoryId,
      reward: session.reward,
      status: session.status,
      removed: session.removed,
      step: session.step,
      metadata: session.metadata,
    },
    view,
    views: viewsOf(session),
    segments: segmentsOfView(session, view).map((segment) => {
      let trainable = 0;
      for (const value of segment.lossMask) trainable += value;
      return {
        index: segment.index,
        view: segment.view,
        tokenCount: segment.tokens.length,
        trainableCount: trainable,
        reason: segment.reason,
        reasons: segment.reasons,
        finishReason: segment.finishReason,
        versionSpans: versionSpans(segment.versions),
        messages: segment.messages,
        extraInfo: segment.extraInfo,
      };
    }),
  };
}

/**
 * One page of a segment's decoded tokens. The whole segment is classified (tool spans depend on
 * what came before) but only the page is materialised.
 */
export function tokenPage(
  session: InspectedSession,
  view: SegmentView,
  segmentPosition: number,
  decoder: TokenDecoder,
  offset = 0,
  limit = Number.POSITIVE_INFINITY,
): TokenPage | undefined {
  const segment = segmentsOfView(session, view)[segmentPosition];
  if (segment === undefined) return undefined;
  const texts = segment.tokens.map((id) => decoder.text(id));
  const kinds = classifyTokens(texts, segment.lossMask);
  const start = Math.max(0, Math.min(offset, segment.tokens.length));
  const end = Math.min(segment.tokens.length, start + Math.max(0, limit));
  const tokens: TokenRow[] = [];
  for (let position = start; position < end; position++) {
    tokens.push({
      position,
      id: segment.tokens[position]!,
      text: texts[position]!,
      kind: kinds[position]!,
      mask: segment.lossMask[position]!,
      logprob: segment.logprobs[position]!,
      version: segment.versions?.[position] ?? null,
    });
  }
  return { total: segment.tokens.length, offset: start, tokens };
}

/** Every view of a session with every token decoded: the JSON export and the standalone page's data. */
export function sessionExport(session: InspectedSession, decoder: TokenDecoder): SessionExport {
  return {
    format: 'dressage-inspector/session@1',
    exportedAt: new Date().toISOString(),
    details: viewsOf(session).map((view) => {
      const detail = sessionDetail(session, view);
      for (const [position, segment] of detail.segments.entries())
        segment.tokens = tokenPage(session, view, position, decoder)!.tokens;
      return detail;
    }),
  };
}
