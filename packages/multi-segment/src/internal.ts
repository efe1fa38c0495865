// Building blocks of @dressage/multi-segment for packages that convert samples themselves: one
// segment into one sample, the token cap, the placeholder trajectory id of an aborted sample, and
// the routed-experts (R3) codec. Not covered by the package's compatibility promise.

export { abortedTrajectoryId } from './mark-aborted.js';
export {
  decodeRoutedExperts,
  type RoutedExpertsShape,
  type RoutedExpertsShapeOptions,
  requireRoutedExpertsShape,
  routedExpertsShapeOf,
  zeroRoutedExperts,
} from './routed-experts.js';
export { tokenCap, type WriteSampleOptions, writeSampleFromSegment } from './write-sample.js';
