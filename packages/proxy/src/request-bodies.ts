import { z } from 'zod';
import { identifierProblem } from './identifiers.js';

/** A session, trajectory or instance id: 1–512 printable Latin-1 characters. */
export const identifierSchema = z.string().superRefine((value, context) => {
  const problem = identifierProblem(value);
  if (problem !== null) context.addIssue({ code: 'custom', message: `the id ${problem}` });
});

/** Body of `POST /session/finalize`. Build-mode keys are refused: the mode is fixed at startup. */
export const finalizeRequestSchema = z
  .looseObject({
    session_id: identifierSchema,
    instance_id: identifierSchema.nullish(),
    label: z.unknown().optional(),
  })
  .superRefine((body, context) => {
    for (const key of [
      'token_build_mode',
      'token_build_modes',
      'trajectory_build_mode',
      'trajectory_build_modes',
    ]) {
      if (key in body) {
        context.addIssue({
          code: 'custom',
          path: [key],
          message: 'the token build mode is fixed when the proxy starts and cannot be chosen per session',
        });
      }
    }
  });

/** Body of `POST /session/discard`. */
export const discardRequestSchema = z.looseObject({ session_id: identifierSchema });

/** Body of `POST /trajectory/read`. */
export const readRequestSchema = z.looseObject({
  trajectory_id: identifierSchema.nullish(),
  session_id: identifierSchema.nullish(),
  instance_id: identifierSchema.nullish(),
  segment_view: z.enum(['lineage', 'timeline']).nullish(),
  drain: z.boolean().nullish(),
  max_groups: z.int().positive().nullish(),
});

/** Body of `POST /v1/rollout/pause`. */
export const rolloutPauseRequestSchema = z.looseObject({
  session_id: z.string().nullish(),
  instance_id: z.string().nullish(),
  reason: z.string().nullish(),
  mode: z.string().nullish(),
  timeout_seconds: z.number().nonnegative().nullish(),
});

/** Body of `POST /v1/rollout/resume`. */
export const rolloutResumeRequestSchema = z.looseObject({
  version: z.union([z.string(), z.number()]).nullish(),
  reason: z.string().nullish(),
});
