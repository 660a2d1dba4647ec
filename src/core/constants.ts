/**
 * Constants shared by the core, the stores and the adapters.
 *
 * Units are in the names: `*Ms` is milliseconds, `*S` is seconds.
 */

/** State of an idempotency key row (column `state`; the state machine in protocol.md). */
export const KeyState = {
  /** Claimed; work may be running (lease valid) or abandoned (lease expired). */
  Started: 'started',
  /** Finished; the stored response is replayed to every retry. */
  Done: 'done',
} as const;
export type KeyState = (typeof KeyState)[keyof typeof KeyState];

/** Recovery point of a freshly claimed key: no atomic phase has committed yet (protocol.md K4). */
export const RECOVERY_POINT_START = 'start';
/** Recovery point written together with the stored response (protocol.md K5). */
export const RECOVERY_POINT_FINISHED = 'finished';

/**
 * Default lease: 60 000 ms (protocol.md K7); the lease
 * must exceed the worst-case execution time between two commits (a PSP call with its own
 * timeout and retries fits comfortably), and the heartbeat extends it for longer work.
 */
export const DEFAULT_LEASE_MS = 60_000;

/**
 * Default retention: 24 h (86 400 000 ms), counted from the claim. Stripe keeps keys 24 h;
 * 24 h to 7 d are common (protocol.md K6). Clients must stop retrying well before this.
 */
export const DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000;

/** Idempotency keys are 1-255 characters (protocol.md H5). */
export const MAX_KEY_LENGTH = 255;

/** Scopes are 1-255 characters, like keys. */
export const MAX_SCOPE_LENGTH = 255;

/** Phase names are 1-64 characters of `[A-Za-z0-9_.-]` so they stay readable in derived keys. */
export const PHASE_NAME_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;

/** Methods protected by default (protocol.md H1; RFC 9110 §9.2.2: the others are idempotent). */
export const DEFAULT_METHODS = ['POST', 'PATCH'] as const;

/** Default request header carrying the key (draft-ietf-httpapi-idempotency-key-header §2). */
export const DEFAULT_KEY_HEADER = 'Idempotency-Key';

/** Header added to every replayed response (Stripe's `Idempotent-Replayed`). */
export const REPLAYED_HEADER = 'Idempotent-Replayed';

/**
 * Response headers stored and replayed by default (protocol.md H8). Everything else, in
 * particular Set-Cookie, Authorization, WWW-Authenticate, Date and per-request ids, is never
 * stored.
 */
export const DEFAULT_REPLAY_HEADERS = [
  'content-type',
  'content-language',
  'content-encoding',
  'content-disposition',
  'location',
  'etag',
  'last-modified',
  'cache-control',
  'link',
] as const;

/** Headers that are never stored, even when a caller adds them to the allow-list. */
export const NEVER_REPLAYED_HEADERS = [
  'set-cookie',
  'authorization',
  'proxy-authorization',
  'www-authenticate',
  'proxy-authenticate',
  'date',
  'x-request-id',
  'request-id',
  'traceparent',
  'tracestate',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
] as const;
