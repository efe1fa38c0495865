import { describeCli } from './cli-case.js';

describeCli('codex', { segmentReasons: ['initial'], threeTurnReasons: ['initial', 'initial', 'initial'] });
