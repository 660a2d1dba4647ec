/**
 * The intent record and the small store interface behind it. An intent is one user action
 * ("pay order 1001") with the idempotency key minted for it; the record is persisted before the
 * first attempt, so every retry, also one after an app restart, sends the same key and the same
 * body bytes (protocol.md K1; protocol.md H21).
 */

/** Where an intent is in its life. `done` and `gave-up` records are pruned (see `IdempotentClient`). */
export type IntentState = 'pending' | 'done' | 'gave-up';

/**
 * One persisted intent, JSON-serialisable as is (stores write it with `JSON.stringify`).
 * Times are epoch milliseconds of the client's clock.
 */
export interface IntentRecord {
  /** The idempotency key, minted once for this intent (a UUID unless the caller sent its own). */
  key: string;
  /** Upper-case HTTP method, e.g. `POST`. */
  method: string;
  /** Absolute request URL. */
  url: string;
  /**
   * Request headers sent on every attempt, lower-case names, in order. Credentials
   * (`Authorization`, `Cookie`, `Proxy-Authorization`) are left out unless the client was made
   * with `persistCredentials: true`; pass them through the client's `headers` option instead.
   * The idempotency key header is not in here: it is added from `key`.
   */
  headers: Array<[string, string]>;
  /** The exact request body bytes, base64 (RFC 4648 §4); `null` for no body. */
  body: string | null;
  /** When the intent was created (its key minted), epoch ms. The horizon counts from here. */
  createdAt: number;
  /** Attempts started so far, over the intent's whole life (counted before each one is sent). */
  attempts: number;
  state: IntentState;
  /** When the record last changed, epoch ms. */
  updatedAt: number;
  /** The final response's status once `state` is `done`. */
  finalStatus?: number;
  /** Keys this intent was sent under before `key`, oldest first: renewed only when the server said a new key was safe (`newKeyWhenSafe`). */
  previousKeys?: string[];
}

/**
 * Persistence for intents. Every method resolves only once the change is durable for that
 * store (an fsync'd file, a committed IndexedDB transaction, a `localStorage` write); the client
 * awaits `put` before the first attempt is sent. Implementations: `MemoryIntentStore`,
 * `LocalStorageIntentStore`, `IndexedDbIntentStore` (`idem/client`), `FileIntentStore`
 * (`idem/client/node`).
 */
export interface IntentStore {
  /** Creates or replaces the record of `intent.key`. */
  put(intent: IntentRecord): Promise<void>;
  /** The record of `key`, or `undefined`. */
  get(key: string): Promise<IntentRecord | undefined>;
  /** Every record, in no particular order. */
  list(): Promise<IntentRecord[]>;
  /** Removes the record of `key`; a missing key is not an error. */
  delete(key: string): Promise<void>;
}

/** Request headers never persisted unless the caller opts in (`persistCredentials`). */
export const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set(['authorization', 'cookie', 'proxy-authorization']);

/** Base64 of `bytes` (RFC 4648 §4), with the `btoa` of browsers and Node ≥ 16. */
export function bytesToBase64(bytes: Uint8Array): string {
  let binary = '';
  // In slices: String.fromCharCode(...huge) would overflow the argument stack.
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** The bytes of a base64 string (RFC 4648 §4). */
export function base64ToBytes(base64: string): Uint8Array {
  const binary = atob(base64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** A checked copy of a record read back from a store; throws `TypeError` on a foreign shape. */
export function parseIntentRecord(value: unknown): IntentRecord {
  const r = value as Partial<IntentRecord> | null;
  if (
    !r ||
    typeof r.key !== 'string' ||
    typeof r.method !== 'string' ||
    typeof r.url !== 'string' ||
    !Array.isArray(r.headers) ||
    !(r.body === null || typeof r.body === 'string') ||
    typeof r.createdAt !== 'number' ||
    typeof r.attempts !== 'number' ||
    !['pending', 'done', 'gave-up'].includes(r.state as string)
  ) {
    throw new TypeError(`not an idem intent record: ${JSON.stringify(value)?.slice(0, 200)}`);
  }
  return { ...(r as IntentRecord), headers: r.headers.map(([n, v]) => [String(n), String(v)] as [string, string]) };
}
