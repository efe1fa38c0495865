// What a paddock needs of the Dressage proxy (finalize, read, discard), and its HTTP implementation.
import {
  type DiscardResponse,
  DressageError,
  discardResponseSchema,
  type FinalizeResponse,
  finalizeResponseSchema,
  issuesFromZodError,
  type Segment,
  trajectoryReadShapeSchema,
} from '@dressage/protocol';
import type { z } from 'zod';

/**
 * The proxy calls a paddock needs. `@dressage/proxy`'s `ProxyClient` satisfies it structurally.
 */
export interface TrajectoryProxy {
  finalizeSession(
    sessionId: string,
    options?: { instanceId?: string; label?: unknown },
  ): Promise<FinalizeResponse>;
  /** One trajectory's segments, token data in typed arrays. */
  readTrajectory(options: { trajectoryId: string; drain?: boolean }): Promise<{ data: Segment[] }>;
  discardSession(sessionId: string): Promise<DiscardResponse>;
}

/** A {@link TrajectoryProxy} over HTTP (the Dressage proxy's `/session/*` and `/trajectory/read`). */
export function httpTrajectoryProxy(baseUrl: string): TrajectoryProxy {
  const base = baseUrl.replace(/\/+$/, '');
  const post = async <T extends z.ZodType>(path: string, body: object, schema: T): Promise<z.output<T>> => {
    const response = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const parsed: unknown = await response.json();
    if (!response.ok)
      throw new DressageError({
        code: 'unavailable',
        message: `${path} answered ${response.status}: ${JSON.stringify(parsed).slice(0, 300)}`,
        details: { status: response.status },
      });
    const result = schema.safeParse(parsed);
    if (!result.success) {
      throw new DressageError({
        code: 'internal',
        message: `${path} answered a body of the wrong shape: ${issuesFromZodError(result.error)
          .slice(0, 3)
          .map((issue) => `${issue.path}: ${issue.message}`)
          .join('; ')}`,
        details: { path },
      });
    }
    return result.data;
  };
  return {
    finalizeSession: (sessionId, options = {}) =>
      post(
        '/session/finalize',
        {
          session_id: sessionId,
          ...(options.instanceId ? { instance_id: options.instanceId } : {}),
          ...(options.label !== undefined ? { label: options.label } : {}),
        },
        finalizeResponseSchema,
      ),
    readTrajectory: async (options) => {
      const read = await post(
        '/trajectory/read',
        { trajectory_id: options.trajectoryId, drain: options.drain ?? false },
        trajectoryReadShapeSchema,
      );
      if (read.mode !== 'trajectory') {
        throw new DressageError({
          code: 'internal',
          message: `/trajectory/read answered mode ${read.mode} to a read by id`,
        });
      }
      return read;
    },
    discardSession: (sessionId) => post('/session/discard', { session_id: sessionId }, discardResponseSchema),
  };
}
