// The README's main job. Until the trainer app exists it runs the most complete end-to-end path the
// packages provide today, on loopback, and says plainly what it did and what it did not do.

import {
  type PackedTrainBatch,
  packTrainBatch,
  parseWire,
  promptRecordSchema,
  type Segment,
  segmentSchema,
  type TrainBatch,
  TrainBatchAssembler,
  type TrainChunk,
  TrainerServiceClient,
  type TrainerServiceServer,
  TrainerServiceService,
  type TrainResponse,
  trainBatchToChunks,
  versionsToSpans,
} from '@dressage/protocol';
import { credentials, Server, ServerCredentials, type ServerReadableStream, status } from '@grpc/grpc-js';

const started = performance.now();
const log = (line: string) => console.log(line);

// 1. Prompts: one JSONL file's worth of records, validated line by line.
const promptLines = [
  '{"prompt": "What is 17 + 25?", "label": "42", "metadata": {"instance_id": "add-001", "reward_fn": "contains_label"}}',
  '{"prompt": "What is 8 + 9?", "label": "17", "metadata": {"instance_id": "add-002", "reward_fn": "contains_label"}}',
];
const prompts = promptLines.map((line, index) =>
  parseWire(promptRecordSchema, JSON.parse(line), `prompt line ${index + 1}`),
);
log(`prompts: ${prompts.length} records validated`);

// 2. Segments as the proxy publishes them: context tokens (mask 0) then model tokens (mask 1).
function segment(instance: string, session: string, index: number, count: number, seed: number): Segment {
  const context = 12 + (seed % 5);
  const output = 6 + (seed % 7);
  const tokens = Array.from({ length: context + output }, (_, i) => 151_000 + ((seed * 31 + i * 17) % 900));
  const mask = tokens.map((_, i) => (i < context ? 0 : 1));
  return parseWire(
    segmentSchema,
    {
      uid: `${session}-${index}`,
      session_id: session,
      trajectory_id: session,
      turn_id: 'turn-1',
      instance_id: instance,
      segment_index: index,
      segment_count: count,
      messages: [{ role: 'user', content: 'question' }],
      tools: null,
      tokens,
      full_logprobs: mask.map((value, i) => (value ? -0.05 * ((i % 5) + 1) : 0)),
      full_loss_mask: mask,
      aligned_response_length: output,
      label: null,
      finish_reason: 'stop',
      timestamp: Date.now() / 1000,
      full_versions: mask.map((value) => (value ? '1' : '-1')),
      extra_info: {
        alignment_method: 'tito',
        token_build_mode: 'tito',
        segment_view: 'lineage',
        context_token_count: context,
        context_delta_token_count: context,
        output_token_count: output,
        num_steps: 1,
        num_turns: 1,
        turn_ids: ['turn-1'],
        lineage_id: `lineage-00000${index + 1}`,
        lineage_index: index,
        branch_from_step_id: null,
        step_ids: ['step-000001'],
        timestamp: String(Date.now() / 1000),
        history_rewritten: false,
        segment_reason: index === 0 ? 'initial' : 'tools_changed',
        segment_reasons: [index === 0 ? 'initial' : 'tools_changed'],
        trajectory_num_segments: count,
        finalization_complete: true,
        finalization_id: 'main-job',
      },
    },
    'segment',
  );
}
const segments: Segment[] = [];
prompts.forEach((prompt, promptIndex) => {
  const instance = prompt.metadata?.instance_id ?? `prompt-${promptIndex}`;
  for (let trajectory = 0; trajectory < 2; trajectory++) {
    const count = trajectory === 0 ? 2 : 1;
    for (let index = 0; index < count; index++) {
      segments.push(
        segment(instance, `${instance}-t${trajectory}`, index, count, promptIndex * 10 + trajectory + index),
      );
    }
  }
});
const spans = versionsToSpans(segments[0]?.full_versions ?? []);
log(`segments: ${segments.length} validated (first one's version spans: ${JSON.stringify(spans)})`);

// 3. A TrainBatch: one sample per segment, the response being everything from the first trainable token.
const batch: TrainBatch = {
  tokens: [],
  response_lengths: [],
  rewards: [],
  raw_reward: [],
  truncated: [],
  sample_indices: [],
  rollout_ids: [],
  loss_masks: [],
  rollout_mask_sums: [],
  rollout_log_probs: [],
};
const rolloutIds = new Map<string, number>();
for (const [index, item] of segments.entries()) {
  const start = item.full_loss_mask.indexOf(1);
  const rolloutId = rolloutIds.get(item.session_id) ?? rolloutIds.size;
  rolloutIds.set(item.session_id, rolloutId);
  batch.tokens.push(item.tokens);
  batch.response_lengths.push(item.tokens.length - start);
  batch.loss_masks.push(item.full_loss_mask.slice(start));
  batch.rollout_log_probs?.push(item.full_logprobs.slice(start));
  batch.rewards.push(item.session_id.endsWith('t0') ? 1 : -1);
  batch.raw_reward.push(item.session_id.endsWith('t0') ? 1 : 0);
  batch.truncated.push(0);
  batch.sample_indices.push(index);
  batch.rollout_ids.push(rolloutId);
  batch.rollout_mask_sums.push(item.aligned_response_length);
}
const packed = packTrainBatch(batch);
log(
  `train batch: ${packed.sample_count} samples, ${packed.tokens.length} tokens, ${packed.loss_masks.reduce((a, b) => a + b, 0)} trainable`,
);

// 4. TrainerService on loopback: a receiving end that reassembles and validates the stream.
let received: PackedTrainBatch | null = null;
const server = new Server();
const trainer: TrainerServiceServer = {
  train(call: ServerReadableStream<TrainChunk, TrainResponse>, callback) {
    const assembler = new TrainBatchAssembler();
    call.on('data', (chunk: TrainChunk) => assembler.push(chunk));
    call.on('end', () => {
      try {
        const { header, batch: assembled } = assembler.finish();
        received = assembled;
        callback(null, {
          batch_id: header.batch_id,
          rollout_id: header.rollout_id,
          samples_trained: 0,
          tokens_trained: 0,
          optimizer_steps: 0,
          metrics: {},
          duration_seconds: 0,
        });
      } catch (error) {
        callback({ code: status.INVALID_ARGUMENT, details: (error as Error).message });
      }
    });
  },
  getInfo: (_call, callback) => callback({ code: status.UNIMPLEMENTED }),
  updateWeights: (_call, callback) => callback({ code: status.UNIMPLEMENTED }),
  saveCheckpoint: (_call, callback) => callback({ code: status.UNIMPLEMENTED }),
  loadCheckpoint: (_call, callback) => callback({ code: status.UNIMPLEMENTED }),
  health: (_call, callback) => callback({ code: status.UNIMPLEMENTED }),
};
server.addService(TrainerServiceService, trainer);
const port = await new Promise<number>((resolve, reject) =>
  server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (error, bound) =>
    error ? reject(error) : resolve(bound),
  ),
);
const client = new TrainerServiceClient(`127.0.0.1:${port}`, credentials.createInsecure());
const chunks = trainBatchToChunks(
  packed,
  { batch_id: 'main-job', rollout_id: 0, global_batch_size: rolloutIds.size, expected_weight_version: '1' },
  { maxChunkBytes: 256 },
);
const response = await new Promise<TrainResponse>((resolve, reject) => {
  const stream = client.train((error, reply) => (error || !reply ? reject(error) : resolve(reply)));
  for (const chunk of chunks) stream.write(chunk);
  stream.end();
});
client.close();
server.forceShutdown();

const arrived = received as PackedTrainBatch | null;
const identical =
  arrived !== null &&
  Buffer.compare(Buffer.from(arrived.tokens.buffer), Buffer.from(packed.tokens.buffer)) === 0 &&
  Buffer.compare(Buffer.from(arrived.loss_masks.buffer), Buffer.from(packed.loss_masks.buffer)) === 0;
log(
  `gRPC Train stream: ${chunks.length} chunks to 127.0.0.1:${port}, batch ${response.batch_id} reassembled ${identical ? 'bit-exact' : 'WITH DIFFERENCES'}`,
);
log('');
log(
  'What ran: prompt validation → segment validation → TrainBatch packing → TrainerService.Train over real gRPC.',
);
log('What did not run yet: no model generated these tokens and no weights were trained; the proxy, the');
log('embedded engine and the trainer are not built yet, so segments and rewards above are synthetic.');
log(`done in ${((performance.now() - started) / 1000).toFixed(2)} s`);
if (!identical) process.exit(1);
