// A proxy that reports weight versions as numbers (an engine's numeric version) or null: the
// whitebox generate function reads its trajectory over HTTP and trains it with string labels, as
// the reference reads them, instead of refusing it.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createSample, type Sample } from '@dressage/protocol';
import { describe, expect, it } from 'vitest';
import { httpTrajectoryProxy } from './trajectory-proxy.js';
import { makeGenerate, WhiteboxAgent } from './whitebox.js';

type Json = Record<string, unknown>;

// A finalized two-token-prompt, three-token-answer segment with versions as a foreign proxy writes them.
function foreignSegment(sessionId: string): Json {
  return {
    uid: `${sessionId}:timeline:0`,
    session_id: sessionId,
    trajectory_id: sessionId,
    turn_id: null,
    instance_id: 'i-1',
    segment_index: 0,
    segment_count: 1,
    messages: [
      { role: 'user', content: 'q' },
      { role: 'assistant', content: 'abc' },
    ],
    tools: null,
    tokens: [1, 2, 3, 4, 5],
    full_logprobs: [0, 0, -0.1, -0.2, -0.3],
    full_loss_mask: [0, 0, 1, 1, 1],
    aligned_response_length: 3,
    finish_reason: 'stop',
    timestamp: 1,
    full_versions: [-1, null, 4, 4, 5],
    extra_info: {
      token_build_mode: 'snapshot',
      segment_view: 'timeline',
      alignment_method: 'snapshot_step',
      context_token_count: 2,
      output_token_count: 3,
      num_steps: 1,
      num_turns: 1,
      turn_ids: ['t'],
      step_id: 'step-1',
      lineage_id: 'l-1',
      lineage_index: 0,
      route_type: 'create',
      route_base_step_id: null,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      timestamp: '1',
      history_rewritten: false,
      trajectory_num_segments: 1,
      finalization_complete: true,
      finalization_id: 'f-1',
    },
  };
}

async function foreignProxy() {
  const server = createServer(async (request, response) => {
    let text = '';
    for await (const chunk of request) text += chunk;
    const body = JSON.parse(text || '{}') as Json;
    const reply = (value: unknown) => {
      response.writeHead(200, { 'content-type': 'application/json' });
      response.end(JSON.stringify(value));
    };
    if (request.url === '/session/finalize') {
      const id = String(body.session_id);
      reply({
        success: true,
        session_id: id,
        trajectory_id: id,
        instance_id: 'i-1',
        finalization_id: 'f-1',
        num_steps: 1,
        num_turns: 1,
        num_segments: 1,
        num_timeline_segments: 1,
        history_rewritten: false,
        token_build_mode: 'snapshot',
        token_build_model: null,
        record_token_versions: true,
        mask_nonlast_version_tokens: false,
      });
    } else if (request.url === '/trajectory/read') {
      reply({
        success: true,
        mode: 'trajectory',
        data: [foreignSegment(String(body.trajectory_id))],
        meta_info: { total_items: 1, total_instances: 1, ready_instances: 1 },
        drained: true,
      });
    } else
      reply({
        success: true,
        session_id: body.session_id,
        session_removed: true,
        segments_removed: 0,
        tool_call_hook_keys_purged: 0,
      });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

class Silent extends WhiteboxAgent {
  async run(): Promise<string> {
    return 'abc';
  }
}

describe('version labels from another proxy', () => {
  it('stringifies numeric versions and reads null as unknown', async () => {
    const proxy = await foreignProxy();
    try {
      const generate = makeGenerate(Silent, { proxy: httpTrajectoryProxy(proxy.url), proxyUrl: proxy.url });
      const [sample] = (await generate(
        createSample({ index: 0, group_index: 0, prompt: 'q', metadata: { instance_id: 'i-1' } }),
      )) as Sample[];
      expect(sample?.remove_sample).toBe(false);
      expect(sample?.metadata.full_versions).toEqual(['-1', 'unknown', '4', '4', '5']);
      expect(sample?.metadata.dressage_end_token_version).toBe('5');
      expect(sample?.metadata.dressage_partial_rollout).toBe(true);
    } finally {
      await proxy.close();
    }
  });
});
