// The loop a trainer will run, in miniature: train a copy of the served model, write a checkpoint,
// have the engine load it by path, and check the engine now samples what the trainer learned with
// the logprobs the trainer computes.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chatPrompt, type EmbeddedFixture, postJson, startFixture } from './__fixtures__/embedded-fixture.js';
import { saveCheckpoint } from './checkpoint.js';
import { CausalLanguageModel } from './model.js';
import { SupervisedTrainer } from './supervised-trainer.js';

let fixture: EmbeddedFixture;
let scratch: string;

beforeAll(async () => {
  fixture = await startFixture();
  scratch = await mkdtemp(join(tmpdir(), 'embedded-warm-start-'));
});

afterAll(async () => {
  await fixture.close();
  await rm(scratch, { recursive: true, force: true });
});

describe('warm-start through a checkpoint', () => {
  it('serves the trained weights: the engine emits the learned tool call with the trainer logprobs', async () => {
    const { tokenizer, vocabulary, model: served } = fixture;
    const prompt = Array.from(tokenizer.encode(chatPrompt('What is 12 + 30? Use the calculator.')));
    const answerText =
      '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 + 30"}}\n</tool_call>';
    const answer = [...tokenizer.encode(answerText), tokenizer.requireTokenId('<|im_end|>')];
    expect(answer.every((id) => vocabulary.has(id))).toBe(true);

    // The trainer's own copy of the served weights.
    const trained = CausalLanguageModel.fromWeights(vocabulary, served.config, served.getWeights());
    const trainer = new SupervisedTrainer(trained, { learningRate: 1e-2 });
    const example = {
      tokenIds: [...prompt, ...answer],
      lossMask: [...prompt.map(() => 0), ...answer.map(() => 1)],
    };
    let loss = Number.POSITIVE_INFINITY;
    for (let step = 0; step < 150 && loss > 0.02; step++) loss = trainer.step([example]).loss;
    expect(loss).toBeLessThan(0.02);

    const directory = join(scratch, 'sft');
    await saveCheckpoint(directory, trained, { weightVersion: 'sft-1' });
    const update = await postJson<{ success: boolean }>(`${fixture.server.url}/update_weights_from_disk`, {
      model_path: directory,
    });
    expect(update.body.success).toBe(true);

    const { body } = await postJson(`${fixture.server.url}/generate`, {
      input_ids: prompt,
      sampling_params: { temperature: 0, max_new_tokens: 64 },
      return_logprob: true,
    });
    expect(body.meta_info.weight_version).toBe('sft-1');
    expect(body.output_ids).toEqual(answer);
    expect(body.meta_info.finish_reason).toEqual({ type: 'stop', matched: answer.at(-1) });
    expect(body.text).toBe(answerText);
    const [recomputed] = trained.sequenceLogprobs([[...prompt, ...body.output_ids]]);
    const trainerLogprobs = recomputed!.slice(prompt.length - 1);
    body.meta_info.output_token_logprobs!.forEach(([logprob], index) => {
      expect(Math.abs(logprob! - trainerLogprobs[index]!)).toBeLessThan(1e-4);
    });
    trainer.dispose();
    trained.dispose();
  });
});
