// A reward module in the reference's style: it registers its function when imported.
import { registerReward } from '@dressage/reward-registry';

registerReward('import_style', (_sample, { args }) =>
  (args.name as string) === 'reward-styles' ? 0.75 : -1,
);
