import { DressageError, type ErrorCode } from '@dressage/protocol';

/**
 * Why an incremental (TITO) encoding was refused. Each one tells the caller to fall back to full
 * tokenization and start a new segment.
 */
export type TitoFailureReason =
  /** The request does not extend the base snapshot message by message. */
  | 'history_not_append_only'
  /** An appended message is `system` or `assistant`: only `user` and `tool` may be appended. */
  | 'appended_role_not_allowed'
  /** A message has a role no renderer knows. */
  | 'unknown_role'
  /** Rendering the dummy context alone is not a string prefix of rendering it with the group. */
  | 'render_diff_not_prefix'
  /** The prefix ids are empty: there is no lineage to extend. */
  | 'empty_prefix';

const marker = Symbol.for('dressage.tito.incremental_error');

/**
 * Thrown when TITO cannot extend a lineage incrementally. The proxy catches it, tokenizes the whole
 * prompt instead and records a `tito_incremental_tokenization_failed` segment boundary.
 */
export class TitoIncrementalError extends DressageError {
  readonly reason: TitoFailureReason;

  constructor(options: {
    reason: TitoFailureReason;
    message: string;
    details?: Record<string, unknown>;
    code?: ErrorCode;
  }) {
    super({
      message: options.message,
      code: options.code ?? 'failed_precondition',
      details: { reason: options.reason, ...options.details },
    });
    this.name = 'TitoIncrementalError';
    Object.defineProperty(this, marker, { value: true });
    this.reason = options.reason;
  }

  /** True for a TitoIncrementalError from any installed copy of this package. */
  static override isInstance(error: unknown): error is TitoIncrementalError {
    return typeof error === 'object' && error !== null && (error as Record<symbol, unknown>)[marker] === true;
  }
}
