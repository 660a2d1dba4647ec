/** The options, events and results of `IdempotentClient`, and the options' defaults and checks. */
import { DEFAULT_KEY_HEADER } from '../core/constants.js';
import type { OperationState } from '../core/next-step.js';
import { HorizonExceedsRetentionError, InvalidClientOptionError } from './errors.js';
import type { IntentRecord, IntentStore } from './intent.js';

/** A `fetch` Response plus what the client knows about it. */
export type IdempotentResponse = Response & {
  /** True when the server said `Idempotent-Replayed: true`: the stored outcome of an earlier attempt. */
  readonly replayed: boolean;
  /** The intent's idempotency key; `null` for a request the client passed through without one. */
  readonly idempotencyKey: string | null;
  /** Attempts made for this intent over its whole life (also before a restart). */
  readonly attempts: number;
  /**
   * The server's next-step signal (`Idem-Operation-State`, protocol.md H41), when it sent one:
   * `completed` on a replay, and on idem's own problems what the client may do next.
   */
  readonly operationState: OperationState | undefined;
  /** True only when the server said `not-applied`: sending the request again under a new key cannot apply it twice. */
  readonly safeNewKey: boolean;
};

/** Passed to `onRetry` before the client waits and sends the intent again. */
export interface RetryEvent {
  key: string;
  /** The attempt that just failed, 1-based, counted over the intent's life. */
  attempt: number;
  /** The wait before the next attempt, in ms (full jitter, at least what `Retry-After` asked). */
  delayMs: number;
  /** The status of a retryable response (409, 429, 5xx), when there was one. */
  status?: number;
  /** The network error or timeout (`TimeoutError` DOMException), when there was no response. */
  error?: unknown;
  /** The wait the server's `Retry-After` asked for, in ms, when it sent one. */
  retryAfterMs?: number;
}

/** Passed to `onGiveUp` when the horizon ran out before a final response. */
export interface GiveUpEvent {
  key: string;
  attempts: number;
  reason: 'attempts' | 'elapsed';
  /** The last retryable status, when the last attempt got a response. */
  status?: number;
  /** The last network error or timeout, when it did not. */
  error?: unknown;
  /** The last response's next-step signal (protocol.md H41), when it carried one; none means the work may have been applied. */
  operationState?: OperationState;
  /** The intent as it was when the client gave up (its record is then deleted). */
  intent: IntentRecord;
}

/** One intent handled by `resumePending()`. */
export type ResumeResult = { key: string; ok: true; response: IdempotentResponse } | { key: string; ok: false; error: unknown };

/** Options of `IdempotentClient`: where intents live, the retry horizon and backoff, headers and hooks. */
export interface IdempotentClientOptions {
  /** Where intents are persisted. @default new MemoryIntentStore() (nothing survives a restart) */
  store?: IntentStore;
  /** The `fetch` to call. @default globalThis.fetch */
  fetch?: typeof fetch;
  /**
   * The server's declared retention of idempotency keys, in ms (idem's `retentionMs`; Stripe:
   * 24 h). The constructor throws `HorizonExceedsRetentionError` unless
   * `maxElapsedMs + attemptTimeoutMs < serverRetentionMs`. @default 86_400_000 (24 h)
   */
  serverRetentionMs?: number;
  /** Attempts per intent over its whole life, also across restarts. @default 10 */
  maxAttempts?: number;
  /**
   * No attempt starts later than this many ms after the intent was created (its key minted),
   * also across restarts. @default 3_600_000 (1 h)
   */
  maxElapsedMs?: number;
  /** Each attempt is aborted after this many ms (headers and body); a timeout is retried. @default 30_000 */
  attemptTimeoutMs?: number;
  /** Backoff base in ms: the n-th retry waits a uniform random time below `min(maxDelayMs, baseDelayMs × 2^(n-1))`. @default 250 */
  baseDelayMs?: number;
  /** Backoff cap in ms (a longer `Retry-After` still wins). @default 30_000 */
  maxDelayMs?: number;
  /** Methods that get an intent (a key, persistence, retries). Others pass through to `fetch` once. @default ['POST', 'PATCH'] */
  methods?: string[];
  /** @default 'Idempotency-Key' (sent as a bare token, as Stripe's SDKs do; idem also accepts it) */
  keyHeader?: string;
  /** Mints a key once per intent, never per attempt. @default () => crypto.randomUUID() (UUID v4) */
  generateKey?: () => string;
  /**
   * Headers added to every attempt and never persisted: put credentials here
   * (`{ authorization: 'Bearer …' }` or a function returning the current ones), so a resumed
   * intent carries them without writing them to disk. Note that idem's default scope is a hash
   * of `Authorization`: a resumed intent must send the same credential to get its replay.
   */
  headers?: HeadersLike | (() => HeadersLike | Promise<HeadersLike>);
  /**
   * Persist `Authorization`, `Cookie` and `Proxy-Authorization` with the intent. Off by default:
   * intent stores are plain files / browser storage. @default false
   */
  persistCredentials?: boolean;
  /** Called before each wait between two attempts. Errors it throws are ignored. */
  onRetry?: (event: RetryEvent) => void;
  /** Called when the horizon runs out before a final response. Errors it throws are ignored. */
  onGiveUp?: (event: GiveUpEvent) => void;
  /** Random source in [0, 1) for the jitter. @default Math.random */
  random?: () => number;
  /**
   * When a replay says the key is spent on a failure that applied nothing (a stored
   * `request-failed-permanently` with `Idem-Operation-State: not-applied`, protocol.md H41),
   * mint a new key for the intent and go on sending it, within the same horizon. The new key is
   * persisted before it is sent; the old ones are kept in `previousKeys`. Never on any other
   * answer: a key is renewed only when the server says that a new one is safe.
   * @default false (the replayed failure is returned, with `safeNewKey: true`)
   */
  newKeyWhenSafe?: boolean;
}

/** What `new Headers(...)` takes: a record, an array of pairs or a `Headers` (the DOM's `HeadersInit`). */
export type HeadersLike = ConstructorParameters<typeof Headers>[0];

/** The scalar options with their defaults applied. */
export type ResolvedOptions = Required<
  Pick<
    IdempotentClientOptions,
    | 'maxAttempts'
    | 'maxElapsedMs'
    | 'attemptTimeoutMs'
    | 'baseDelayMs'
    | 'maxDelayMs'
    | 'keyHeader'
    | 'generateKey'
    | 'persistCredentials'
    | 'random'
    | 'newKeyWhenSafe'
  >
>;

/**
 * Applies the defaults and checks the ranges.
 * @throws InvalidClientOptionError for an option out of range
 * @throws HorizonExceedsRetentionError when `maxElapsedMs + attemptTimeoutMs >= serverRetentionMs`
 */
export function resolveOptions(options: IdempotentClientOptions): ResolvedOptions {
  const o = {
    maxAttempts: options.maxAttempts ?? 10,
    maxElapsedMs: options.maxElapsedMs ?? 3_600_000,
    attemptTimeoutMs: options.attemptTimeoutMs ?? 30_000,
    baseDelayMs: options.baseDelayMs ?? 250,
    maxDelayMs: options.maxDelayMs ?? 30_000,
    keyHeader: options.keyHeader ?? DEFAULT_KEY_HEADER,
    generateKey: options.generateKey ?? (() => crypto.randomUUID()),
    persistCredentials: options.persistCredentials ?? false,
    random: options.random ?? Math.random,
    newKeyWhenSafe: options.newKeyWhenSafe ?? false,
  };
  const serverRetentionMs = options.serverRetentionMs ?? 86_400_000;
  if (!Number.isInteger(o.maxAttempts) || o.maxAttempts < 1) throw new InvalidClientOptionError(`maxAttempts must be an integer >= 1, got ${o.maxAttempts}`);
  for (const name of ['maxElapsedMs', 'attemptTimeoutMs', 'baseDelayMs', 'maxDelayMs'] as const) {
    if (!Number.isFinite(o[name]) || o[name] < 0) throw new InvalidClientOptionError(`${name} must be a finite number of ms >= 0, got ${o[name]}`);
  }
  if (o.attemptTimeoutMs <= 0) throw new InvalidClientOptionError(`attemptTimeoutMs must be > 0, got ${o.attemptTimeoutMs}`);
  if (!(serverRetentionMs > 0)) throw new InvalidClientOptionError(`serverRetentionMs must be > 0, got ${serverRetentionMs}`);
  if (o.maxElapsedMs + o.attemptTimeoutMs >= serverRetentionMs) {
    throw new HorizonExceedsRetentionError(o.maxElapsedMs + o.attemptTimeoutMs, serverRetentionMs);
  }
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(o.keyHeader)) throw new InvalidClientOptionError(`keyHeader is not a header name: ${o.keyHeader}`);
  return o;
}
