/**
 * idem: idempotency keys for Node.js. What an application calls: the engine (claim, lease,
 * fencing token, atomic phases), the web-standard HTTP core and the context a handler gets, the
 * completer, the request fingerprint, derived keys, the errors, the constants and the types.
 *
 * Stores live in `idem/postgres`, `idem/redis` and `idem/memory`; framework adapters in
 * `idem/hono`, `idem/express`, `idem/fastify`, `idem/nestjs`, `idem/next`, `idem/lambda` and
 * `idem/koa`; queue consumers in `idem/consumer`, `idem/amqp` and `idem/nats`; OpenTelemetry in
 * `idem/otel`; the client in `idem/client` (`idem/client/node` for Node). The building blocks for writing a store
 * or an adapter (key parsing, the claim decision, response capture and replay, problem
 * details, media types, the validation limits, the recovery point names `RECOVERY_POINT_START`
 * and `RECOVERY_POINT_FINISHED`, the problem type prefix `PROBLEM_TYPE_PREFIX`) are in `idem/core`
 * and `idem/http`.
 */
export {
  KeyState,
  DEFAULT_LEASE_MS,
  DEFAULT_RETENTION_MS,
  DEFAULT_METHODS,
  DEFAULT_KEY_HEADER,
  REPLAYED_HEADER,
  DEFAULT_REPLAY_HEADERS,
} from './core/constants.js';
export * from './core/errors.js';
export { fingerprint, type FingerprintInput } from './core/fingerprint.js';
export { deriveKey } from './core/derived-key.js';
export type * from './store/types.js';
export { IdempotencyEngine, type EngineOptions, type BeginInput, type BeginResult } from './engine/engine.js';
export type { Execution, IdempotencyEvent } from './engine/execution.js';
export { ReplayCache, type ReplayCacheOptions, type ReplayCacheStats } from './engine/replay-cache.js';
export { HttpIdempotency, type HttpRequestInput, type IdempotencyOptions, type Prepared } from './http/idempotency.js';
export type { IdempotencyContext } from './http/context.js';
export { Completer, type CompleterOptions, type CompleterReport } from './http/completer.js';
export { problemResponse, ProblemKind, type ProblemDetails, type ProblemFormat, type StripeError } from './http/problem.js';
