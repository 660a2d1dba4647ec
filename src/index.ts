/**
 * idem: idempotency keys for Node.js. The core (key parsing, fingerprint, decision), the
 * engine (claim, lease, fencing token, atomic phases) and the web-standard HTTP layer.
 * Stores live in `idem/postgres`; framework adapters in `idem/hono` and `idem/express`.
 */
export * from './core/constants.js';
export * from './core/errors.js';
export { parseIdempotencyKey, validateKey } from './core/key.js';
export { fingerprint, isJsonMediaType, mediaType, sameFingerprint, type FingerprintInput } from './core/fingerprint.js';
export { decide, type Decision, type ExistingKey } from './core/decide.js';
export { deriveKey } from './core/derived-key.js';
export type * from './store/types.js';
export { IdempotencyEngine, type EngineOptions, type BeginInput, type BeginResult } from './engine/engine.js';
export { Execution, type IdempotencyEvent } from './engine/execution.js';
export * from './http/index.js';
