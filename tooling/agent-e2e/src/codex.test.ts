import { describeCli } from './cli-case.js';

describeCli('codex', { segmentReasons: ['initial'] });
