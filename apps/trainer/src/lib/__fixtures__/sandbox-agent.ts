// A whitebox agent with a sandbox: before asking the model, it keeps today's weather in a file of its
// sandbox and reads it back through the toolbox's sandbox tools (one call with bad arguments, to see
// the model-facing error), then runs the weather conversation.
import {
  PaddockWhiteboxAgent,
  type SandboxToolContext,
  sandboxTools,
  Toolbox,
  type WhiteboxRunContext,
} from '@dressage/paddock';
import type { Sample } from '@dressage/protocol';
import { episodeOf, runWeatherConversation } from '../../../recipes/weather/task.js';

const tools = new Toolbox<SandboxToolContext>(sandboxTools());

const call = (name: string, args: Record<string, unknown>) => ({
  choices: [
    {
      message: {
        content: '',
        tool_calls: [{ id: name, function: { name, arguments: JSON.stringify(args) } }],
      },
    },
  ],
});

export class SandboxWeatherAgent extends PaddockWhiteboxAgent {
  async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    const sandbox = { sandbox: this.tools };
    const episode = episodeOf({ prompt: sample.prompt, label: sample.label });
    const written = await tools.executeTools(
      call('file_write', { path: 'today.txt', content: episode.condition }),
      sandbox,
    );
    const read = await tools.executeTools(
      call('shell_exec', { command: 'cat /workspace/today.txt; echo; hostname' }),
      sandbox,
    );
    const bad = await tools.executeTools(call('file_read', { path: 7 }), sandbox);
    context.metadata.sandbox = {
      written: written.calls[0]?.content,
      read: read.calls[0]?.content,
      bad: bad.calls[0]?.content,
    };
    const outcome = await runWeatherConversation(context.chat, episode);
    context.metadata.weather = outcome;
    return outcome.final_answer;
  }
}
