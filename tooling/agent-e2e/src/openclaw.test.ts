import { describeCli } from './cli-case.js';

// OpenClaw adds a context message (its active exec sessions) to each request only and re-sends its
// replies without their reasoning: no request extends the previous one, so every model call starts
// a lineage of its own (packages/paddock/README.md).
describeCli('openclaw', {
  segmentReasons: ['initial', 'initial'],
  threeTurnReasons: ['initial', 'initial', 'initial', 'initial', 'initial', 'initial'],
});
