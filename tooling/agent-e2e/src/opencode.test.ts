import { describeCli } from './cli-case.js';

describeCli('opencode', { segmentReasons: ['initial'], threeTurnReasons: ['initial', 'initial', 'initial'] });
