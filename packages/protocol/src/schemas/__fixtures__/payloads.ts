// Payloads shaped as the reference documents them (dressage-reference §1.3, §1.10, §4.4), used
// by the schema tests and the round-trip tests.

export const toolConversationRequest = {
  model: 'proxy-model',
  stream: true,
  stream_options: { include_usage: true },
  temperature: 1.0,
  top_p: 1.0,
  max_tokens: 512,
  tool_choice: 'auto',
  seed: 7,
  tools: [
    {
      type: 'function',
      function: {
        name: 'calculator',
        description: 'Evaluate an arithmetic expression',
        parameters: {
          type: 'object',
          properties: { expression: { type: 'string' } },
          required: ['expression'],
        },
      },
    },
  ],
  messages: [
    { role: 'system', content: 'You are a careful assistant.' },
    { role: 'user', content: [{ type: 'text', text: 'What is 12 + 30?' }] },
    {
      role: 'assistant',
      content: null,
      reasoning_content: 'I should use the calculator.',
      tool_calls: [
        {
          id: 'call_0a1b2c3d',
          type: 'function',
          index: 0,
          function: { name: 'calculator', arguments: '{"expression": "12 + 30"}' },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'call_0a1b2c3d', content: '42' },
  ],
};

export const nonStreamResponse = {
  id: 'chatcmpl-0123456789ab',
  object: 'chat.completion',
  created: 1764450000,
  model: 'proxy-model',
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content: null,
        reasoning_content: 'Use the tool.',
        tool_calls: [
          {
            id: 'call1a2b3c4d',
            type: 'function',
            index: 0,
            function: { name: 'calculator', arguments: '{"expression": "1+1"}' },
          },
        ],
      },
      finish_reason: 'tool_calls',
    },
  ],
  usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150 },
};

export const streamFrames = [
  {
    id: 'chatcmpl-0123456789ab',
    object: 'chat.completion.chunk',
    created: 1764450000,
    model: 'proxy-model',
    choices: [{ index: 0, delta: { role: 'assistant' }, finish_reason: null }],
    usage: null,
  },
  {
    id: 'chatcmpl-0123456789ab',
    object: 'chat.completion.chunk',
    created: 1764450000,
    model: 'proxy-model',
    choices: [{ index: 0, delta: { content: 'The answ' }, finish_reason: null }],
    usage: null,
  },
  {
    id: 'chatcmpl-0123456789ab',
    object: 'chat.completion.chunk',
    created: 1764450000,
    model: 'proxy-model',
    choices: [
      {
        index: 0,
        delta: {
          tool_calls: [
            {
              index: 0,
              id: 'call1a2b3c4d',
              type: 'function',
              function: { name: 'calculator', arguments: '{}' },
            },
          ],
        },
        finish_reason: null,
      },
    ],
    usage: null,
  },
  {
    id: 'chatcmpl-0123456789ab',
    object: 'chat.completion.chunk',
    created: 1764450000,
    model: 'proxy-model',
    choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }],
    usage: null,
  },
  {
    id: 'chatcmpl-0123456789ab',
    object: 'chat.completion.chunk',
    created: 1764450000,
    model: 'proxy-model',
    choices: [],
    usage: { prompt_tokens: 120, completion_tokens: 30, total_tokens: 150 },
  },
];

export const promptLine = {
  prompt: 'Fix the failing test in utils.py',
  label: 'PASS',
  metadata: {
    instance_id: 'inst-001',
    reward_fn: 'contains_label',
    blackbox_type: 'opencode',
    blackbox_execute_cmds: {
      before_agent: [{ name: 'setup', cmd: 'pip install -e .', required: true, timeout: 120 }],
      after_agent: [{ name: 'tests', cmd: 'pytest -q', required: false, stdout_limit: 65536 }],
    },
    sandbox_image: 'python:3.11',
    env_type: 'swe',
  },
  difficulty: 'easy',
};

// Lineage view of the reference's tito example: "hi" → "hello", then "again" → "follow".
export function lineageSegment() {
  const context1 = [1, 2, 3];
  const output1 = [10, 11, 12, 13, 14, 15];
  const context2 = [4, 5, 6, 7];
  const output2 = [20, 21, 22, 23, 24];
  const tokens = [...context1, ...output1, ...context2, ...output2];
  const mask = [
    ...context1.map(() => 0),
    ...output1.map(() => 1),
    ...context2.map(() => 0),
    ...output2.map(() => 1),
  ];
  return {
    uid: 'seg-abc-0',
    session_id: 'sess-1',
    trajectory_id: 'sess-1',
    turn_id: '__implicit_turn__:0123456789abcdef0123456789abcdef',
    instance_id: 'inst-001',
    segment_index: 0,
    segment_count: 1,
    messages: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
      { role: 'user', content: 'again' },
      { role: 'assistant', content: 'follow' },
    ],
    tools: null,
    tokens,
    full_logprobs: mask.map((value) => (value === 1 ? -0.1 : 0)),
    full_loss_mask: mask,
    aligned_response_length: 11,
    label: 'follow',
    finish_reason: 'stop',
    timestamp: 1764450000.5,
    full_versions: mask.map((value) => (value === 1 ? '3' : '-1')),
    extra_info: {
      alignment_method: 'tito',
      token_build_mode: 'tito',
      segment_view: 'lineage',
      context_token_count: 7,
      context_delta_token_count: 7,
      output_token_count: 11,
      num_steps: 2,
      num_turns: 1,
      turn_ids: ['__implicit_turn__:0123456789abcdef0123456789abcdef'],
      lineage_id: 'lineage-000001',
      lineage_index: 0,
      branch_from_step_id: null,
      step_ids: ['step-000001', 'step-000002'],
      timestamp: '1764450000.5',
      history_rewritten: false,
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      trajectory_num_segments: 1,
      finalization_complete: true,
      finalization_id: '9f2c4e1a',
    },
  };
}

export function timelineSegment() {
  return {
    ...lineageSegment(),
    uid: 'seg-abc-t1',
    segment_index: 1,
    segment_count: 2,
    tokens: [1, 2, 3, 10, 11],
    full_logprobs: [0, 0, 0, -0.5, -0.25],
    full_loss_mask: [0, 0, 0, 1, 1],
    aligned_response_length: 2,
    full_versions: ['-1', '-1', '-1', '3', '3'],
    extra_info: {
      alignment_method: 'snapshot_step',
      token_build_mode: 'snapshot',
      segment_view: 'timeline',
      context_token_count: 3,
      output_token_count: 2,
      num_steps: 1,
      num_turns: 1,
      turn_ids: ['turn-1'],
      step_id: 'step-000002',
      timestamp: '1733011200.5',
      history_rewritten: false,
      trajectory_num_segments: 2,
      lineage_id: 'lineage-000001',
      lineage_index: 0,
      route_type: 'append',
      route_base_step_id: 'step-000001',
      segment_reason: 'initial',
      segment_reasons: ['initial'],
      finalization_complete: true,
      finalization_id: '9f2c4e1a',
    },
  };
}

export function stepRecord() {
  const prompt = [1, 2, 3, 4];
  const response = [10, 11, 151645];
  return {
    turn_id: 'turn-1',
    step_id: 'step-000002',
    lineage_id: 'lineage-000001',
    lineage_index: 0,
    route_type: 'append',
    route_base_step_id: 'step-000001',
    request_messages: [{ role: 'user', content: 'hi' }],
    normalized_request_messages: [{ role: 'user', content: 'hi' }],
    messages_snapshot: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
    ],
    normalized_messages_snapshot: [
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
    ],
    tools: null,
    raw_response_text: 'hello<|im_end|>',
    prompt_token_ids: prompt,
    prompt_token_logprobs: null,
    snapshot_token_ids: [...prompt, ...response],
    response_token_ids: response,
    response_logprobs: [-0.1, -0.2, -0.01],
    all_token_ids: [...prompt, ...response],
    all_logprobs: [0, 0, 0, 0, -0.1, -0.2, -0.01],
    all_logprobs_invalid: false,
    input_token_texts: null,
    output_token_texts: null,
    snapshot_rendered: '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n',
    snapshot_rendered_len: 58,
    snapshot_tools_hash: null,
    prompt_versions: prompt.map(() => '-1'),
    response_versions: response.map(() => '3'),
    all_versions: [...prompt.map(() => '-1'), ...response.map(() => '3')],
    concat_token_ids: [198, 4, ...response],
    concat_response_logprobs: [0, 0, -0.1, -0.2, -0.01],
    concat_response_mask: [0, 0, 1, 1, 1],
    concat_versions: ['-1', '-1', '3', '3', '3'],
    concat_context_token_count: 2,
    concat_output_token_count: 3,
    concat_logprobs_invalid: false,
    concat_incremental_tokenization_failed: false,
    response_routed_experts_chunks: null,
    lineage_segment_boundary_before: false,
    lineage_segment_reasons_before: [],
    segment_boundary_before: false,
    segment_reason_before: null,
    segment_reasons_before: [],
    rewrite_reason: null,
    finish_reason: 'stop',
    request_version: '3',
    response_version: '3',
    tool_call_hook_metadata: null,
    timestamp: 1764450000.25,
  };
}
