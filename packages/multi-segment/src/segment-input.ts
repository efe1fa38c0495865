/**
 * The fields of a finalized segment that expansion reads. `@dressage/protocol`'s `Segment` (typed
 * token arrays, what `ProxyClient.readTrajectory` returns) and its JSON `SegmentRecord` both
 * satisfy it; the looser shape lets callers pass records that were not parsed with a schema.
 */
export interface SegmentInput {
  uid?: string | null;
  session_id?: string | null;
  instance_id?: string | null;
  segment_index: number;
  segment_count?: number;
  /** The last step's full message snapshot, including the assistant's reply. */
  messages?: readonly unknown[] | null;
  tokens: ArrayLike<number>;
  full_logprobs: ArrayLike<number>;
  full_loss_mask: ArrayLike<number>;
  /** Per-token weight versions; numbers are stringified and null recorded as `"unknown"`. */
  full_versions?: readonly (string | number | null)[] | null;
  /** R3 routed experts: base64 chunks of `row_count` rows each. */
  routed_experts_chunks?: readonly unknown[] | null;
  finish_reason?: string | null;
  extra_info?: Readonly<Record<string, unknown>> | null;
}
