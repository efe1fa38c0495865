// The TrainerService contract, generated from proto/dressage/trainer/v1/trainer.proto by the
// `generate` task. Each message name is both its TypeScript type and its codec (encode/decode).
export {
  GetInfoRequest,
  GetInfoResponse,
  HealthRequest,
  HealthResponse,
  HealthResponse_Status as HealthStatus,
  LoadCheckpointRequest,
  LoadCheckpointResponse,
  LossConfig,
  SampleBlock,
  SaveCheckpointRequest,
  SaveCheckpointResponse,
  TrainBatchHeader,
  TrainChunk,
  TrainerServiceClient,
  type TrainerServiceServer,
  TrainerServiceService,
  TrainResponse,
  UpdateWeightsRequest,
  UpdateWeightsResponse,
} from './gen/dressage/trainer/v1/trainer.js';

/** Fully qualified name of the gRPC service. */
export const TRAINER_SERVICE_NAME = 'dressage.trainer.v1.TrainerService';
