import type { SegmentView, SessionSummary } from '../model.js';
import type { RunErrorLine } from '../sources/source.js';
import type { TokenKind, TokenVersionSpan } from './token-kinds.js';

/** One page of the session list. */
export interface SessionPage {
  /** Sessions matching the filters (all pages). */
  total: number;
  offset: number;
  limit: number;
  items: SessionSummary[];
}

/** One decoded token as the session view shows it. */
export interface TokenRow {
  position: number;
  id: number;
  /** Decoded text of this id alone. */
  text: string;
  kind: TokenKind;
  mask: number;
  logprob: number;
  /** Weight version, or null when the source recorded none. */
  version: string | null;
}

/** One page of a segment's tokens. */
export interface TokenPage {
  total: number;
  offset: number;
  tokens: TokenRow[];
}

/** A segment without its token arrays (fetched page by page). */
export interface SegmentDetail {
  index: number;
  view: SegmentView;
  tokenCount: number;
  trainableCount: number;
  reason: string | null;
  reasons: string[];
  finishReason: string | null;
  versionSpans: TokenVersionSpan[];
  messages: unknown[];
  extraInfo: Record<string, unknown>;
  /** Every token, only in exports. */
  tokens?: TokenRow[];
}

/** The session view's payload for one segment view. */
export interface SessionDetail {
  session: {
    id: string;
    sessionId: string | null;
    instanceId: string | null;
    trajectoryId: string | null;
    reward: number | null;
    status: string;
    removed: boolean;
    step: number | null;
    metadata: Record<string, unknown>;
  };
  view: SegmentView;
  views: SegmentView[];
  segments: SegmentDetail[];
  /** The run's recorded failures of this session (`errors.jsonl`); empty for other sources. */
  errors?: RunErrorLine[];
}

/** What `/api/errors` answers: the run's recorded failures, optionally of one session. */
export interface ErrorPage {
  total: number;
  items: RunErrorLine[];
}

/** A session exported as one self-contained JSON document: every view, every token decoded. */
export interface SessionExport {
  format: 'dressage-inspector/session@1';
  exportedAt: string;
  details: SessionDetail[];
}

/** What `/api/info` answers. */
export interface InspectorInfo {
  kind: 'run' | 'file' | 'store';
  path: string;
  sessionCount: number;
  details: Record<string, unknown>;
}
