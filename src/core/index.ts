/**
 * `idem/core`: the pure building blocks under the engine, for writing a store or an adapter of
 * your own. No I/O, no framework, no driver: key parsing and validation, the request
 * fingerprint, the claim decision (docs/protocol.md K3), derived keys, the response cipher, the
 * constants and the errors. Application code needs only the root entry `idem`.
 */
export * from './constants.js';
export * from './errors.js';
export { parseIdempotencyKey, validateKey } from './key.js';
export { dataKey, DATA_KEY_PREFIX } from './data-key.js';
export { fingerprint, isJsonMediaType, mediaType, sameFingerprint, type FingerprintInput } from './fingerprint.js';
export { decide, type Decision, type ExistingKey } from './decide.js';
export { deriveKey } from './derived-key.js';
export { MalformedBodyError } from './multipart.js';
export { isSafeNewKey, OPERATION_STATE_HEADER, OperationState, parseOperationState } from './next-step.js';
export { aesGcmCipher, responseAad, type EncryptionOptions, type ResponseCipher } from './cipher.js';
