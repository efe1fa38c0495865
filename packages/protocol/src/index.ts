// Public surface of @dressage/protocol: Dressage's wire and file formats (schemas, the gRPC
// contract, the packed train batch), its errors and weight-version labels. The low-level parts
// packages build on (typed-array packing, the Train stream's chunk codec and assembler, secrets,
// loopback checks) are in `@dressage/protocol/internal`; the shared HTTP layer is
// `@dressage/protocol/http`.

export {
  DressageError,
  type DressageErrorOptions,
  type ErrorCode,
  errorCodes,
  grpcStatusByCode,
  httpStatusByCode,
  isErrorCode,
} from './errors.js';
export * from './schemas/blackbox-responses.js';
export {
  type AssistantMessage,
  assistantMessageSchema,
  type ChatCompletionChunk,
  type ChatCompletionRequest,
  type ChatCompletionResponse,
  type ChatMessage,
  type ContentPart,
  chatCompletionChunkSchema,
  chatCompletionRequestSchema,
  chatCompletionResponseSchema,
  chatMessageSchema,
  contentPartSchema,
  type FinishReason,
  finishReasonSchema,
  messageContentSchema,
  systemMessageSchema,
  type Tool,
  type ToolCall,
  type ToolMessage,
  toolCallSchema,
  toolMessageSchema,
  toolSchema,
  type Usage,
  usageSchema,
  userMessageSchema,
} from './schemas/chat.js';
export {
  jsonObjectSchema,
  logprobsSchema,
  maskValueSchema,
  type RoutedExpertsChunk,
  routedExpertsChunkSchema,
  tokenIdSchema,
  tokenIdsSchema,
} from './schemas/common.js';
export {
  blackboxExecuteCommandsSchema,
  createPromptRecordSchema,
  type ExecuteCommand,
  executeCommandSchema,
  type PromptKeys,
  type PromptMetadata,
  type PromptRecord,
  promptMetadataSchema,
  promptRecordSchema,
  promptSchema,
} from './schemas/prompt.js';
export {
  type CapabilitiesResponse,
  capabilitiesResponseSchema,
  type DiscardResponse,
  discardResponseSchema,
  type FinalizeResponse,
  finalizeResponseSchema,
  type RolloutPauseResponse,
  type RolloutPauseState,
  type RolloutResumeResponse,
  rolloutPauseResponseSchema,
  rolloutPauseStateSchema,
  rolloutResumeResponseSchema,
  type TrajectoryReadResponse,
  type TrajectoryStats,
  trajectoryReadResponseSchema,
  trajectoryReadShapeSchema,
  trajectoryReadToJson,
  trajectoryStatsSchema,
} from './schemas/proxy-responses.js';
export {
  createSample,
  prefixCacheInfoSchema,
  type Sample,
  type SampleInput,
  SampleStatus,
  sampleSchema,
  sampleStatusSchema,
  specInfoSchema,
} from './schemas/sample.js';
export {
  type LineageExtraInfo,
  lineageExtraInfoSchema,
  type Segment,
  type SegmentExtraInfo,
  type SegmentMeta,
  type SegmentRecord,
  segmentExtraInfoSchema,
  segmentFromRecord,
  segmentSchema,
  segmentShapeSchema,
  segmentToJson,
  type TimelineExtraInfo,
  timelineExtraInfoSchema,
  versionLabel,
} from './schemas/segment.js';
export {
  type SglangFinishReason,
  type SglangGenerateRequest,
  type SglangGenerateResponse,
  type SglangLogprobEntry,
  type SglangMetaInfo,
  type SglangSamplingParams,
  sglangFinishReasonSchema,
  sglangGenerateRequestSchema,
  sglangGenerateResponseSchema,
  sglangMetaInfoSchema,
  sglangSamplingParamsSchema,
} from './schemas/sglang-generate.js';
export {
  normalizedMessageSchema,
  type RouteType,
  routeTypeSchema,
  type SegmentReason,
  type StepRecord,
  segmentReasonSchema,
  stepRecordSchema,
} from './schemas/step-record.js';
export { type TrainBatch, trainBatchSchema } from './schemas/train-batch.js';
export {
  CONTEXT_OVERFLOW_MESSAGE,
  type ContextOverflowBody,
  contextOverflowBody,
  contextOverflowBodySchema,
  contextOverflowPhaseSchema,
  type DetailErrorBody,
  detailErrorBodySchema,
  type ProxyErrorDetail,
  type ProxyErrorName,
  proxyErrorDetailSchema,
  type StreamErrorFrame,
  streamErrorFrameSchema,
  toStreamErrorFrame,
} from './schemas/wire-errors.js';
export {
  type PackedRoutedExperts,
  type PackedTrainBatch,
  packTrainBatch,
  type RoutedExpertsDtype,
  unpackTrainBatch,
} from './train-batch-packing.js';
export * from './trainer.js';
export {
  formatIssuePath,
  issuesFromZodError,
  type ParseResult,
  parseWire,
  safeParseWire,
  type ValidationIssue,
} from './validation.js';
export {
  CONTEXT_TOKEN_VERSION,
  distinctRealVersions,
  isRealVersion,
  spansToVersions,
  UNKNOWN_TOKEN_VERSION,
  type VersionSpan,
  versionSpanSchema,
  versionsToSpans,
} from './versions.js';
