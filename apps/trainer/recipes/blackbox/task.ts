// The shell task of the blackbox recipe: an agent CLI gets a one-line file-system task in its
// sandbox, and the reward is whether the record's `check` command, run in the same sandbox after
// the agent, succeeds. Nothing here talks to the model: the agent CLI does, through the proxy.
import type { Sample } from '@dressage/protocol';

/** The name of the after-agent command whose exit status is the reward. */
export const checkCommandName = 'check';

interface CommandResult {
  stage?: string;
  name?: string;
  returncode?: number;
  timed_out?: boolean;
}

/**
 * 1 when the sample's `check` command (an `after_agent` command of its record) exited 0 in the
 * sandbox, else 0. A sample whose agent failed before the commands ran has none: 0.
 */
export function shellCheckReward(sample: Sample): number {
  const results = (sample.metadata.execute_cmds ?? []) as CommandResult[];
  const check = results.find((result) => result.stage === 'after_agent' && result.name === checkCommandName);
  return check !== undefined && check.returncode === 0 && check.timed_out !== true ? 1 : 0;
}

export const rewards = { shell_check: shellCheckReward };
