import { describeCli } from './cli-case.js';

describeCli('qwen_code', {
  segmentReasons: ['initial'],
  threeTurnReasons: ['initial', 'initial', 'initial'],
});
