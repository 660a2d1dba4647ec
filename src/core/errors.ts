/**
 * Errors thrown by idem. Every error has a stable `code` (match on it, never on the message),
 * says where it is thrown whether a retry can succeed (`retryable`), and, where another error
 * caused it, carries `cause`. Expected outcomes of the protocol (replay, mismatch, in progress)
 * are results, not errors; these are for misuse and for failures. `retryable` is the failure
 * rule's input (protocol.md K5): a failure a retry can outgrow never counts toward
 * `maxAttempts`; one the same request meets again does.
 */

/** Stable error codes, one per condition. */
export const ErrorCode = {
  InvalidKey: 'IDEM_INVALID_KEY',
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
  StoreTimeout: 'IDEM_STORE_TIMEOUT',
  MissingPartition: 'IDEM_MISSING_PARTITION',
  DataDirLocked: 'IDEM_DATA_DIR_LOCKED',
  FailedPermanently: 'IDEM_FAILED_PERMANENTLY',
  UnencodableResult: 'IDEM_UNENCODABLE_RESULT',
  MalformedBody: 'IDEM_MALFORMED_BODY',
  // idem/redis durability (src/redis/options.ts)
  NotReplicated: 'IDEM_REDIS_NOT_REPLICATED',
  // idem/webhooks (src/webhooks/presets.ts)
  WebhookRefused: 'IDEM_WEBHOOK_REFUSED',
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

/** Options of {@link IdempotencyError}: the cause, and whether a retry can succeed. */
export interface IdempotencyErrorOptions {
  cause?: unknown;
  /** True when the same request, sent again later, can succeed (the store back, the lease free). @default false */
  retryable?: boolean;
}

/** Base class of every error idem throws. */
export class IdempotencyError extends Error {
  /** Stable machine-readable code, e.g. `IDEM_LEASE_LOST`. */
  readonly code: ErrorCode;
  /**
   * True when a later attempt of the same request can succeed (the store unreachable, a lease
   * lost, a key in progress); false when it would meet this error again (a refused response, a
   * bad option). A retryable failure never counts toward `maxAttempts` (protocol.md K5).
   */
  readonly retryable: boolean;
  constructor(code: ErrorCode, message: string, options?: IdempotencyErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options?.retryable === true;
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
    super(ErrorCode.LeaseLost, message, { retryable: true });
  }
}

/** The store could not be reached or failed; `cause` carries the driver's error (with its SQLSTATE `code`). */
export class StoreUnavailableError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.StoreUnavailable, message, { cause: options?.cause, retryable: true });
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

/**
 * The work ran but its outcome cannot be stored: `idempotent(fn)`'s codec refused the result (a
 * BigInt or a cycle under JSON), or a response is not a status 100-599 with a byte body. Its
 * effects stand, so the key is not freed for a rerun: the attempt ends for good at once and the
 * failure is the key's stored outcome where the surface keeps one (protocol.md K46). Not retryable.
 */
export class UnencodableResultError extends IdempotencyError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(ErrorCode.UnencodableResult, message, options);
  }
}

/**
 * A call of idem's to its store missed its deadline (`storeTimeoutMs`, protocol.md H17), or a
 * pool's queue was full: the store is silent, down or overloaded. The engine answers 503 with
 * `Retry-After`; a retry can succeed.
 */
export class StoreTimeoutError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.StoreTimeout, message, { retryable: true });
  }
}
