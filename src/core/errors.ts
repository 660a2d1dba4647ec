/**
 * Errors thrown by idem. Every error has a stable `code` (match on it, never on the message)
 * and, where another error caused it, `cause`. Expected outcomes of the protocol (replay,
 * mismatch, in progress) are results, not errors; these are for misuse and for failures.
 */

/** Stable error codes, one per condition. */
export const ErrorCode = {
  InvalidKey: 'IDEM_INVALID_KEY',
  MissingKey: 'IDEM_MISSING_KEY',
  InvalidScope: 'IDEM_INVALID_SCOPE',
  InvalidPhase: 'IDEM_INVALID_PHASE',
  InvalidOption: 'IDEM_INVALID_OPTION',
  LeaseLost: 'IDEM_LEASE_LOST',
  StoreUnavailable: 'IDEM_STORE_UNAVAILABLE',
  ExecutionClosed: 'IDEM_EXECUTION_CLOSED',
  UnknownKeyId: 'IDEM_UNKNOWN_KEY_ID',
  ResponseUnreadable: 'IDEM_RESPONSE_UNREADABLE',
  MissingDependency: 'IDEM_MISSING_DEPENDENCY',
  UnsupportedResponse: 'IDEM_UNSUPPORTED_RESPONSE',
  // idem/function (src/function)
  KeyMismatch: 'IDEM_KEY_MISMATCH',
  KeyInProgress: 'IDEM_KEY_IN_PROGRESS',
  StoredFailure: 'IDEM_STORED_FAILURE',
  // idem/lambda batches (src/lambda/batch-events.ts)
  InvalidEvent: 'IDEM_INVALID_EVENT',
  // idem/client (src/client/errors.ts)
  ClientInvalidOption: 'IDEM_CLIENT_INVALID_OPTION',
  HorizonExceedsRetention: 'IDEM_CLIENT_HORIZON_EXCEEDS_RETENTION',
  GaveUp: 'IDEM_CLIENT_GAVE_UP',
  UnknownIntent: 'IDEM_CLIENT_UNKNOWN_INTENT',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Base class of every error idem throws. */
export class IdempotencyError extends Error {
  /** Stable machine-readable code, e.g. `IDEM_LEASE_LOST`. */
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }
}

/**
 * The idempotency key is malformed: empty, longer than 255 characters, not printable ASCII,
 * a malformed sf-string, or sent in more than one header line (protocol.md H5).
 */
export class InvalidKeyError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.InvalidKey, message, options);
  }
}

/** The route requires an idempotency key and none was sent (protocol.md H2). */
export class MissingKeyError extends IdempotencyError {
  constructor(message = 'An idempotency key is required for this request') {
    super(ErrorCode.MissingKey, message);
  }
}

/** The scope resolver returned something that is not a 1-255 character string. */
export class InvalidScopeError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.InvalidScope, message);
  }
}

/** A phase name is not 1-64 characters of `[A-Za-z0-9_.-]`, or is reserved. */
export class InvalidPhaseError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.InvalidPhase, message);
  }
}

/** An option passed to a factory is out of range; thrown at start-up, never per request. */
export class InvalidOptionError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.InvalidOption, message);
  }
}

/**
 * A fenced write matched no row: another worker took the key over (its `lock_version` is
 * newer) or the key was removed. The write was rolled back together with the phase's local
 * effects; stop working on this key (protocol.md K8).
 */
export class LeaseLostError extends IdempotencyError {
  constructor(message = 'The lease on this idempotency key was lost to another worker; the write was rolled back') {
    super(ErrorCode.LeaseLost, message);
  }
}

/** The store could not be reached or failed; `cause` carries the driver's error (with its SQLSTATE `code`). */
export class StoreUnavailableError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.StoreUnavailable, message, options);
  }
}

/** A method was called on an execution that has already finished, been released or abandoned. */
export class ExecutionClosedError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.ExecutionClosed, message);
  }
}

/**
 * A stored response was encrypted under a key id that is not in the configured keys (a key
 * removed too early from `keys`, or a row written by another deployment). Nothing is replayed:
 * add the key back. `keyId` names the missing key.
 */
export class UnknownKeyIdError extends IdempotencyError {
  /** The key id the stored response names. */
  readonly keyId: string;
  constructor(keyId: string) {
    super(
      ErrorCode.UnknownKeyId,
      `The stored response is encrypted with key id ${JSON.stringify(keyId)}, which is not configured; add it to \`keys\` to replay it`,
    );
    this.keyId = keyId;
  }
}

/**
 * A stored response cannot be read back as it was written: its ciphertext fails
 * authentication (tampered, or copied from another row), it is encrypted but no cipher is
 * configured, or its out-of-line body is missing. Never replayed as something else.
 */
export class ResponseUnreadableError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.ResponseUnreadable, message, options);
  }
}

/**
 * A feature needs an optional peer dependency that is not installed (`idb-keyval` for
 * `IndexedDbIntentStore`, `write-file-atomic` for `FileIntentStore`). `dependency` names the
 * package to install; `cause` is the failed import.
 */
export class MissingDependencyError extends IdempotencyError {
  /** The npm package to install, e.g. `write-file-atomic`. */
  readonly dependency: string;
  constructor(dependency: string, feature: string, options?: { cause?: unknown }) {
    super(ErrorCode.MissingDependency, `${feature} needs the optional peer dependency ${dependency}: npm install ${dependency}`, options);
    this.dependency = dependency;
  }
}

/**
 * A protected handler tried to answer in a way idem cannot record, e.g. Fastify's
 * `reply.hijack()` (the handler then writes to the socket itself). Thrown to the handler, so
 * the request fails with idem's 500 problem and the lease is released; nothing is stored.
 */
export class UnsupportedResponseError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.UnsupportedResponse, message);
  }
}
