// Public surface of @dressage/multi-segment: from the finalized segments of a trajectory to slime
// samples, the anchor rule every consumer shares, and the multi-segment rollout metrics.

export {
  type AnchorSample,
  findTrajectoryAnchors,
  isLiveSample,
  segmentIndexOf,
  trajectoryIdOf,
} from './anchors.js';
export { type ExpandOptions, expandSegmentsToSamples } from './expand.js';
export { abortedTrajectoryId, type MarkAbortedOptions, markAbortedNoGrad } from './mark-aborted.js';
export {
  computeMultiSegmentMetrics,
  mopdTeacherMetrics,
  type RolloutMetricOptions,
  rawRewardTrajectoryMean,
  rolloutLogMetrics,
} from './metrics.js';
export {
  decodeRoutedExperts,
  type RoutedExperts,
  type RoutedExpertsShape,
  type RoutedExpertsShapeOptions,
  requireRoutedExpertsShape,
  routedExpertsShapeOf,
  zeroRoutedExperts,
} from './routed-experts.js';
export type { SegmentInput } from './segment-input.js';
export { tokenCap, type WriteSampleOptions, writeSampleFromSegment } from './write-sample.js';
