// Public surface of @dressage/multi-segment: from the finalized segments of a trajectory to slime
// samples, the anchor rule every consumer shares, and the multi-segment rollout metrics. The parts
// expansion is built from (one segment into one sample, the token cap, the routed-experts codec) are
// in `@dressage/multi-segment/internal`.

export {
  type AnchorSample,
  findTrajectoryAnchors,
  isLiveSample,
  segmentIndexOf,
  trajectoryIdOf,
} from './anchors.js';
export { type ExpandOptions, expandSegmentsToSamples } from './expand.js';
export { type MarkAbortedOptions, markAbortedNoGrad } from './mark-aborted.js';
export {
  computeMultiSegmentMetrics,
  mopdTeacherMetrics,
  type RolloutMetricOptions,
  rawRewardTrajectoryMean,
  rolloutLogMetrics,
} from './metrics.js';
export type { RoutedExperts } from './routed-experts.js';
