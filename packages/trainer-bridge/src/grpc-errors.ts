import { DressageError, type ErrorCode, errorCodes, grpcStatusByCode } from '@dressage/protocol';
import { Metadata, type ServiceError, type StatusObject, status } from '@grpc/grpc-js';

/** Metadata key carrying a DressageError's `details` as JSON, so they survive the wire. */
export const ERROR_DETAILS_METADATA_KEY = 'dressage-error-details';

const codeByGrpcStatus = new Map<number, ErrorCode>(errorCodes.map((code) => [grpcStatusByCode[code], code]));

/** The Dressage error code of a gRPC status number (`unknown` for numbers outside the table). */
export function errorCodeOfGrpcStatus(grpcStatus: number): ErrorCode {
  return codeByGrpcStatus.get(grpcStatus) ?? 'unknown';
}

function isServiceError(error: unknown): error is ServiceError {
  return typeof error === 'object' && error !== null && typeof (error as ServiceError).code === 'number';
}

function readDetails(metadata: Metadata | undefined): Record<string, unknown> {
  const raw = metadata?.get(ERROR_DETAILS_METADATA_KEY)[0];
  if (typeof raw !== 'string') return {};
  try {
    const parsed: unknown = JSON.parse(raw);
    return typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** Where a failed call went, for error messages. */
export interface CallContext {
  /** The trainer's address, as given to the client. */
  address: string;
  /** The RPC, e.g. `Train`. */
  method: string;
}

/**
 * Turns whatever a grpc-js call failed with into a DressageError whose message says what to do:
 * an unreachable trainer is `unavailable`, an oversized message `resource_exhausted`, a rejected
 * batch keeps the trainer's own code, message and details.
 */
export function errorFromGrpc(error: unknown, context: CallContext): DressageError {
  if (DressageError.isInstance(error)) return error;
  if (!isServiceError(error)) return DressageError.from(error, 'unknown');
  const code = errorCodeOfGrpcStatus(error.code);
  const text = error.details || error.message;
  const details = { ...readDetails(error.metadata), address: context.address, method: context.method };
  const where = `${context.method} on the trainer at ${context.address}`;
  let message: string;
  switch (error.code) {
    case status.UNAVAILABLE:
      message = `The trainer at ${context.address} is unreachable (${text}); is it running and listening there?`;
      break;
    case status.DEADLINE_EXCEEDED:
      message = `${where} did not finish before its deadline (${text})`;
      break;
    case status.CANCELLED:
      message = `${where} was cancelled (${text})`;
      break;
    case status.RESOURCE_EXHAUSTED:
      message = `${where} exceeded a size limit: ${text}. Raise maxMessageBytes on both client and server, or send smaller chunks (maxChunkBytes)`;
      break;
    default:
      message = `The trainer at ${context.address} rejected ${context.method}: ${text}`;
  }
  return new DressageError({ code, message, details, cause: error });
}

/** The status a server handler answers with for a thrown value (a DressageError keeps its code). */
export function errorToGrpcStatus(error: unknown): Partial<StatusObject> {
  const normalized = DressageError.from(error, 'internal');
  const metadata = new Metadata();
  if (Object.keys(normalized.details).length > 0) {
    try {
      // Header values must be printable ASCII: escape everything else the way JSON does.
      const json = JSON.stringify(normalized.details).replace(
        /[^\x20-\x7e]/g,
        (character) => `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
      );
      metadata.set(ERROR_DETAILS_METADATA_KEY, json);
    } catch {
      // Details that cannot be serialised stay in the server's logs only.
    }
  }
  return { code: normalized.grpcStatus, details: normalized.message, metadata };
}
