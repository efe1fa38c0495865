import { describeCli } from './cli-case.js';

describeCli('claude_code', {
  segmentReasons: ['initial'],
  threeTurnReasons: ['initial', 'initial', 'initial'],
});
