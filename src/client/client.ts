/**
 * `IdempotentClient`: one idempotency key per user intent, minted and persisted before the
 * first attempt, then the same key and the same body bytes on every attempt, also after an app
 * restart (protocol.md K1, H21-H22).
 * Browser-safe: no `node:` imports. The Node file store is in `idem/client/node`.
 */
import { DEFAULT_METHODS } from '../core/constants.js';
import { GaveUpError, InvalidClientOptionError, UnknownIntentError } from './errors.js';
import { base64ToBytes, bytesToBase64, CREDENTIAL_HEADERS, type IntentRecord, type IntentStore } from './intent.js';
import { MemoryIntentStore } from './memory-store.js';
import { type IdempotentClientOptions, type IdempotentResponse, type ResolvedOptions, type ResumeResult, resolveOptions } from './options.js';
import { decorate, isReplay, notify, operationStateOf, type Outcome, rebuild, sleep, spentButNotApplied } from './responses.js';
import { classifyStatus, fullJitterDelayMs, parseRetryAfterMs } from './retry-policy.js';

export type { GiveUpEvent, HeadersLike, IdempotentClientOptions, IdempotentResponse, ResumeResult, RetryEvent } from './options.js';

/**
 * A `fetch`-compatible client that makes POST/PATCH safe to retry.
 *
 * For each intent it mints one idempotency key (outside any retry loop), persists
 * `{key, method, url, headers, body bytes, createdAt, attempts, state}` in the `store` **before**
 * the first attempt, and sends identical bytes with that key on every attempt. It retries network
 * errors, timeouts (`attemptTimeoutMs`), 409, 429 and 5xx with exponential backoff and full
 * jitter, waiting at least what `Retry-After` asks (delta-seconds or HTTP-date); it never retries
 * 400, 422 or any other 4xx, nor a replay, nor a request without a key. It stops at the horizon
 * (`maxAttempts`, `maxElapsedMs` from creation), which must stay shorter than the server's
 * retention.
 *
 * Pruning rule: when an intent finishes (a final response, or the client gives up) its record is
 * first marked `done` / `gave-up`, then deleted. A crash between the two writes leaves a finished
 * record, which the next `resumePending()` deletes without sending it.
 *
 * @example
 * const client = new IdempotentClient({ store: new FileIntentStore({ dir: '.intents' }),
 *   headers: () => ({ authorization: `Bearer ${token}` }) });
 * await client.resumePending();              // at start-up: finish what a crash interrupted
 * const res = await client.fetch('https://api.example.com/v1/charges', {
 *   method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(charge) });
 * res.status; res.replayed; res.idempotencyKey;
 */
export class IdempotentClient {
  readonly store: IntentStore;
  readonly #fetch: typeof fetch;
  readonly #o: ResolvedOptions;
  readonly #methods: Set<string>;
  readonly #headers: IdempotentClientOptions['headers'];
  readonly #onRetry: IdempotentClientOptions['onRetry'];
  readonly #onGiveUp: IdempotentClientOptions['onGiveUp'];
  /** Keys this client is sending right now: `resumePending()` leaves them alone. */
  readonly #inFlight = new Set<string>();
  /** Monotonic birth time (`performance.now()`) of intents created by this client instance. */
  readonly #bornAt = new Map<string, number>();

  /**
   * @throws InvalidClientOptionError for an option out of range
   * @throws HorizonExceedsRetentionError when `maxElapsedMs + attemptTimeoutMs >= serverRetentionMs`
   */
  constructor(options: IdempotentClientOptions = {}) {
    const o = resolveOptions(options);
    const fetchImpl = options.fetch ?? globalThis.fetch;
    if (typeof fetchImpl !== 'function') throw new InvalidClientOptionError('no fetch in this runtime: pass options.fetch');
    this.#o = o;
    // Called as a plain function: a browser's fetch throws "Illegal invocation" when called as a
    // method of another object.
    this.#fetch = (input, init) => fetchImpl(input, init);
    this.store = options.store ?? new MemoryIntentStore();
    this.#methods = new Set((options.methods ?? DEFAULT_METHODS).map((m) => m.toUpperCase()));
    this.#headers = options.headers;
    this.#onRetry = options.onRetry;
    this.#onGiveUp = options.onGiveUp;
  }

  /**
   * `fetch` with idempotency: for a method in `methods`, `createIntent` then `send`; any other
   * method is passed to `fetch` once, without a key and without retries. `init.signal` aborts
   * the whole intent (the record stays pending, for `resumePending()` or `discard()`).
   *
   * @returns the final response (fully read, so a reset mid-body is retried, not returned), or
   *   the last retryable response (409/429/5xx) when the horizon ran out
   * @throws GaveUpError when the horizon ran out and the last attempt got no response
   * @throws the signal's reason when `init.signal` aborts
   */
  async fetch(input: string | URL | Request, init?: RequestInit): Promise<IdempotentResponse> {
    const method = (init?.method ?? (input instanceof Request ? input.method : 'GET')).toUpperCase();
    if (!this.#methods.has(method)) {
      const response = await this.#fetch(input, init);
      return decorate(response, null, 1);
    }
    const intent = await this.createIntent(input, init);
    return this.send(intent.key, { signal: init?.signal ?? undefined });
  }

  /**
   * Mints the key (or takes the caller's, when the request already carries `keyHeader`), reads
   * the body bytes once and persists the intent; resolves once the store has it. Send it with
   * `send(intent.key)`.
   *
   * @throws TypeError when the method is not one of `methods`, or `fetch`'s own TypeErrors (bad URL)
   */
  async createIntent(input: string | URL | Request, init?: RequestInit): Promise<IntentRecord> {
    const request = new Request(input, init);
    const method = request.method.toUpperCase();
    if (!this.#methods.has(method)) throw new TypeError(`${method} does not take an idempotency key here (methods: ${[...this.#methods].join(', ')})`);
    const body = request.body ? new Uint8Array(await request.arrayBuffer()) : null;
    // Minted here, once per intent, and never again: every attempt and every resume reads it
    // back from the record.
    const key = request.headers.get(this.#o.keyHeader) ?? this.#o.generateKey();
    const headers: Array<[string, string]> = [];
    request.headers.forEach((value, name) => {
      if (name === this.#o.keyHeader.toLowerCase()) return;
      if (CREDENTIAL_HEADERS.has(name) && !this.#o.persistCredentials) return;
      headers.push([name, value]);
    });
    const now = Date.now();
    const intent: IntentRecord = {
      key,
      method,
      url: request.url,
      headers,
      body: body && bytesToBase64(body),
      createdAt: now,
      attempts: 0,
      state: 'pending',
      updatedAt: now,
    };
    await this.store.put(intent);
    this.#bornAt.set(key, performance.now());
    return intent;
  }

  /**
   * Sends the persisted intent `key` until a final response, retrying with the same key and
   * bytes; see the class description for what is retried.
   *
   * @throws UnknownIntentError when the store has no such intent
   * @throws GaveUpError, or the signal's reason, as `fetch`
   */
  async send(key: string, options: { signal?: AbortSignal } = {}): Promise<IdempotentResponse> {
    if (this.#inFlight.has(key)) throw new TypeError(`intent ${key} is already being sent by this client`);
    this.#inFlight.add(key);
    let intent: IntentRecord | undefined;
    try {
      intent = await this.store.get(key);
      if (!intent) throw new UnknownIntentError(key);
      return await this.#run(intent, options.signal);
    } finally {
      this.#inFlight.delete(key);
      // A key renewed on the way (newKeyWhenSafe) was in flight too.
      if (intent) this.#inFlight.delete(intent.key);
    }
  }

  /**
   * Re-sends every persisted unfinished intent with its original key and body, one after the
   * other, e.g. at app start-up after a crash or a closed tab. Intents past the horizon are given
   * up (`onGiveUp`) without being sent; finished records left by a crash are deleted. Intents
   * this client is sending right now are skipped. Two processes resuming one intent at once are
   * safe: the server answers one of them 409 (retried) and replays the result to it.
   *
   * @returns one result per intent handled, in no particular order; never throws for one intent
   */
  async resumePending(options: { signal?: AbortSignal } = {}): Promise<ResumeResult[]> {
    const results: ResumeResult[] = [];
    for (const intent of await this.store.list()) {
      options.signal?.throwIfAborted();
      if (intent.state !== 'pending') {
        await this.store.delete(intent.key);
        continue;
      }
      if (this.#inFlight.has(intent.key)) continue;
      try {
        results.push({ key: intent.key, ok: true, response: await this.send(intent.key, options) });
      } catch (error) {
        if (options.signal?.aborted) throw error;
        results.push({ key: intent.key, ok: false, error });
      }
    }
    return results;
  }

  /** Drops a persisted intent without sending it again (the server may have run it already). */
  async discard(key: string): Promise<void> {
    await this.store.delete(key);
    this.#bornAt.delete(key);
  }

  /** The attempt loop. The key is read from the record: nothing in here mints one. */
  async #run(intent: IntentRecord, signal: AbortSignal | undefined): Promise<IdempotentResponse> {
    const body = intent.body === null ? null : base64ToBytes(intent.body);
    const age = this.#ageClock(intent);
    let last: Outcome | undefined;
    for (;;) {
      signal?.throwIfAborted();
      const exhausted = this.#exhausted(intent, age, 0);
      if (exhausted) return this.#giveUp(intent, exhausted, last);

      intent.attempts += 1;
      intent.updatedAt = Date.now();
      await this.store.put(intent); // counted before it is sent: a crash mid-attempt still counts
      last = await this.#attempt(intent, body, signal);

      let status: number | undefined;
      let retryAfterMs: number | undefined;
      if ('response' in last) {
        const { response } = last;
        status = response.status;
        if (this.#o.newKeyWhenSafe && spentButNotApplied(response)) {
          // The server said the key is spent on a failure that applied nothing (protocol.md H41).
          await this.#renewKey(intent);
        } else if (classifyStatus(status, isReplay(response)) === 'final') {
          await this.#finish(intent, 'done', status);
          return decorate(response, intent.key, intent.attempts);
        }
        retryAfterMs = parseRetryAfterMs(response.headers.get('retry-after'), Date.now());
      }
      const backoffMs = fullJitterDelayMs(intent.attempts, this.#o.baseDelayMs, this.#o.maxDelayMs, this.#o.random);
      const delayMs = Math.max(backoffMs, retryAfterMs ?? 0);
      // No point waiting for an attempt the horizon will not allow.
      const exhaustedAfterWait = this.#exhausted(intent, age, delayMs);
      if (exhaustedAfterWait) return this.#giveUp(intent, exhaustedAfterWait, last);

      notify(this.#onRetry, {
        key: intent.key,
        attempt: intent.attempts,
        delayMs,
        ...(status === undefined ? { error: 'error' in last ? last.error : undefined } : { status }),
        ...(retryAfterMs === undefined ? {} : { retryAfterMs }),
      });
      await sleep(delayMs, signal);
    }
  }

  /** Which horizon would stop an attempt started `waitMs` from now, if any. */
  #exhausted(intent: IntentRecord, age: () => number, waitMs: number): 'attempts' | 'elapsed' | undefined {
    if (intent.attempts >= this.#o.maxAttempts) return 'attempts';
    if (age() + waitMs >= this.#o.maxElapsedMs) return 'elapsed';
    return undefined;
  }

  /**
   * The intent's age in ms, measured on the monotonic clock (`performance.now()`), so a
   * wall-clock step neither ends the horizon early nor stretches it. An intent created by
   * this client counts from its creation; one read back after a restart counts from its
   * persisted `createdAt` once (the only wall-clock reading), then monotonically.
   */
  #ageClock(intent: IntentRecord): () => number {
    const born = this.#bornAt.get(intent.key);
    if (born !== undefined) return () => performance.now() - born;
    const ageAtStart = Math.max(0, Date.now() - intent.createdAt);
    const start = performance.now();
    return () => ageAtStart + (performance.now() - start);
  }

  /** One attempt: the same key and bytes, the per-attempt timeout, the whole body read. */
  async #attempt(intent: IntentRecord, body: Uint8Array | null, signal: AbortSignal | undefined): Promise<Outcome> {
    const timeout = AbortSignal.timeout(this.#o.attemptTimeoutMs);
    const headers = new Headers(intent.headers);
    const extra = typeof this.#headers === 'function' ? await this.#headers() : this.#headers;
    if (extra) {
      for (const [name, value] of new Headers(extra)) headers.set(name, value);
    }
    headers.set(this.#o.keyHeader, intent.key);
    try {
      const response = await this.#fetch(intent.url, {
        method: intent.method,
        headers,
        body,
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
      // Read the whole body inside the attempt: a connection lost mid-body is retried like one
      // lost before the headers, instead of handing the caller a response it cannot read.
      const bytes = new Uint8Array(await response.arrayBuffer());
      return { response: rebuild(response, bytes) };
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      return { error };
    }
  }

  /**
   * Moves the intent to a new key: the record under the new key is durable before the old one
   * is deleted, and before anything is sent with it. A crash between the two leaves both; the
   * old one only replays its stored failure again when resumed.
   */
  async #renewKey(intent: IntentRecord): Promise<void> {
    const old = intent.key;
    intent.previousKeys = [...(intent.previousKeys ?? []), old];
    intent.key = this.#o.generateKey();
    intent.updatedAt = Date.now();
    this.#inFlight.add(intent.key);
    await this.store.put(intent);
    await this.store.delete(old);
    const born = this.#bornAt.get(old);
    this.#bornAt.delete(old);
    if (born !== undefined) this.#bornAt.set(intent.key, born);
  }

  async #finish(intent: IntentRecord, state: 'done' | 'gave-up', finalStatus?: number): Promise<void> {
    intent.state = state;
    intent.updatedAt = Date.now();
    if (finalStatus !== undefined) intent.finalStatus = finalStatus;
    await this.store.put(intent);
    await this.store.delete(intent.key);
    this.#bornAt.delete(intent.key);
  }

  async #giveUp(intent: IntentRecord, reason: 'attempts' | 'elapsed', last: Outcome | undefined): Promise<IdempotentResponse> {
    await this.#finish(intent, 'gave-up');
    const lastResponse = last && 'response' in last ? last.response : undefined;
    const operationState = lastResponse && operationStateOf(lastResponse);
    notify(this.#onGiveUp, {
      key: intent.key,
      attempts: intent.attempts,
      reason,
      ...(lastResponse ? { status: lastResponse.status } : last && 'error' in last ? { error: last.error } : {}),
      ...(operationState ? { operationState } : {}),
      intent: structuredClone(intent),
    });
    if (lastResponse) return decorate(lastResponse, intent.key, intent.attempts);
    throw new GaveUpError(intent.key, intent.attempts, reason, last && 'error' in last ? last.error : undefined);
  }
}
