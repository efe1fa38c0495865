// The weather agent behind a station that is offline whenever the question is "Weather now?".
import type { WhiteboxRunContext } from '@dressage/paddock';
import { DressageError, type Sample } from '@dressage/protocol';
import { WeatherAgent } from '../../../recipes/weather/task.js';

export class FlakyWeatherAgent extends WeatherAgent {
  override async run(sample: Sample, context: WhiteboxRunContext): Promise<string | null> {
    if (sample.prompt === 'Weather now?') {
      throw new DressageError({ code: 'unavailable', message: 'the weather station is offline' });
    }
    return super.run(sample, context);
  }
}
