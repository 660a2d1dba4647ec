import { DEFAULT_METHODS, DEFAULT_REPLAY_HEADERS } from '../core/constants.js';
import { InvalidOptionError, LeaseLostError, StoreUnavailableError } from '../core/errors.js';
import { MalformedBodyError } from '../core/multipart.js';
import { type BeginResult, IdempotencyEngine } from '../engine/engine.js';
import type { Execution } from '../engine/execution.js';
import { hasCompletion } from '../store/capabilities.js';
import type { StoredResponse } from '../store/types.js';
import { HttpAttempts } from './attempts.js';
import { readBodyWithin } from './body.js';
import { IdempotencyContext } from './context.js';
import { expiresHeaderName, httpDate, withHeader, withResponseHeader } from './expiry.js';
import { resolveKeyHeader } from './key-header.js';
import { toHeaders } from './node/headers.js';
import type { HttpRequestInput, IdempotencyOptions } from './options.js';
import type { HeldResponse, Prepared, SendHeld } from './prepared.js';
import { idemProblem, idemProblemParts, ProblemKind, type ProblemFormat } from './problem.js';
import { RequestFingerprints } from './request-fingerprint.js';
import { RequestKeys } from './request-key.js';
import {
  bodyResponse,
  cachedReplayResponse,
  captureResponse,
  isNullBodyStatus,
  replayHeaderFilter,
  replayResponse,
  type ResponseCapture,
  storedHeaders,
} from './response.js';
import { credentialScope } from './scope.js';

export type { HttpRequestInput, IdempotencyOptions } from './options.js';

export { EXPIRES_HEADER } from './expiry.js';
export type { HeldResponse, Prepared, SendHeld } from './prepared.js';

/**
 * The framework-neutral HTTP core on web-standard Request/Response. Adapters (Hono, Express)
 * are thin layers over {@link prepare}; {@link handle} serves any fetch-style runtime.
 */
export class HttpIdempotency<Tx = unknown> {
  readonly engine: IdempotencyEngine<Tx>;
  private readonly methods: Set<string>;
  private readonly keyHeader: string;
  /** The key header's name, lower-case, as Node's `headersDistinct` spells it (resolved from `keyHeader` or its alias `headerName`). */
  readonly keyHeaderField: string;
  private readonly capture: ResponseCapture;
  private readonly keepHeader: (name: string) => boolean;
  private readonly maxResponseBytes: number;
  private readonly discardStatuses: Set<number>;
  private readonly releaseStatuses: Set<number>;
  private readonly maxAttempts: number;
  private readonly problems: ProblemFormat;
  /** The engine's attempt under HTTP's policy, and its answers (protocol.md K5, K23). */
  private readonly attempts: HttpAttempts<Tx>;
  /** The expiry header's name (protocol.md H40), or undefined when off. */
  private readonly expiresHeader: string | undefined;
  /** Request fingerprints (protocol.md H7) through the memo of recent raw requests (H29). */
  private readonly fingerprints: RequestFingerprints;
  /** The request's key: header (H4, H5) or `getKey`. */
  private readonly keys: RequestKeys;

  /** @throws {InvalidOptionError} for missing store/engine or bad options (at start-up, never per request). */
  constructor(private readonly options: IdempotencyOptions<Tx>) {
    if (options.engine) this.engine = options.engine;
    else if (options.store) this.engine = new IdempotencyEngine<Tx>({ ...options, store: options.store });
    else throw new InvalidOptionError('idem: pass `store` (e.g. new PostgresStore({ client })) or `engine`');
    this.methods = new Set((options.methods ?? DEFAULT_METHODS).map((m) => m.toUpperCase()));
    this.keyHeader = resolveKeyHeader(options);
    this.keyHeaderField = this.keyHeader.toLowerCase();
    const keep = replayHeaderFilter(options.replayHeaders ?? DEFAULT_REPLAY_HEADERS);
    const maxResponseBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    if (!(Number.isInteger(maxResponseBytes) && maxResponseBytes >= 0)) {
      throw new InvalidOptionError('idem: maxResponseBytes must be a whole number of bytes >= 0');
    }
    const maxBodyBytes = options.maxBodyBytes;
    if (maxBodyBytes !== undefined && !(Number.isInteger(maxBodyBytes) && maxBodyBytes >= 0)) {
      throw new InvalidOptionError('idem: maxBodyBytes must be a whole number of bytes >= 0');
    }
    this.keepHeader = keep;
    this.maxResponseBytes = maxResponseBytes;
    this.capture = (response) => captureResponse(response, keep, maxResponseBytes, () => this.tooLarge(maxResponseBytes));
    this.discardStatuses = new Set(options.discardStatuses ?? [400, 401, 403, 422, 429]);
    this.releaseStatuses = new Set(options.releaseStatuses ?? [503]);
    this.maxAttempts = options.maxAttempts ?? 5;
    if (!(this.maxAttempts === Infinity || (Number.isInteger(this.maxAttempts) && this.maxAttempts >= 1))) {
      throw new InvalidOptionError('idem: maxAttempts must be a whole number >= 1, or Infinity');
    }
    this.problems = options.problems ?? {};
    this.attempts = new HttpAttempts<Tx>({
      maxAttempts: this.maxAttempts,
      storeThrows: options.onThrow === 'store',
      capture: this.capture,
      problems: this.problems,
      withExpiry: (response, execution) => this.withExpiry(response, execution),
    });
    this.expiresHeader = expiresHeaderName(options.expiresHeader);
    this.fingerprints = new RequestFingerprints(options);
    this.keys = new RequestKeys(this.keyHeader, options.getKey, options.ignoreKeyHeader);
    if (options.retryAfterS !== undefined && !(Number.isInteger(options.retryAfterS) && options.retryAfterS >= 1)) {
      throw new InvalidOptionError('idem: retryAfterS must be a whole number of seconds >= 1');
    }
    if (options.storeRequests && !hasCompletion(this.engine.store)) {
      throw new InvalidOptionError('idem: storeRequests needs a store that declares completion (saveRequest), e.g. PostgresStore');
    }
    if (![undefined, 400, 409, 422].includes(options.mismatchStatus)) {
      throw new InvalidOptionError('idem: mismatchStatus must be 400, 409 or 422');
    }
    if (![undefined, 409, 423].includes(options.inProgressStatus)) {
      throw new InvalidOptionError('idem: inProgressStatus must be 409 or 423');
    }
  }

  /** True when requests with this method are protected. */
  protects(method: string): boolean {
    return this.methods.has(method.toUpperCase());
  }

  /**
   * Decides what to do with a request before its handler runs: parse the key, resolve the
   * scope, fingerprint the raw body, claim (protocol.md K2-K3). Every protocol outcome is a
   * response (400 key, 422 mismatch, 409 in progress, 503 store unavailable).
   *
   * @throws {InvalidScopeError} or whatever the `scope` resolver throws (a bug in the app;
   *   nothing was claimed).
   */
  async prepare(request: HttpRequestInput, limits?: { maxWaitMs?: number }): Promise<Prepared<Tx>> {
    if (!this.protects(request.method)) return { kind: 'pass' };
    const read = this.keys.read(request);
    if (read.kind === 'invalid') return this.problem(ProblemKind.InvalidKey, 400, read.detail);
    const key = read.key;
    if (key === undefined) {
      if (!this.options.required) return { kind: 'pass' };
      return this.problem(ProblemKind.MissingKey, 400, `Send an ${this.keyHeader} header (1-255 printable ASCII characters, e.g. a UUID) with this request.`);
    }
    let begun: BeginResult<Tx>;
    try {
      const scope = this.options.scope ? await this.options.scope(request) : credentialScope(request.headers);
      const fp = this.fingerprints.of(request);
      begun = await this.engine.begin(
        limits?.maxWaitMs === undefined ? { scope, key, fingerprint: fp } : { scope, key, fingerprint: fp, maxWaitMs: limits.maxWaitMs },
      );
    } catch (error) {
      if (error instanceof StoreUnavailableError) {
        return this.storeUnavailable();
      }
      // A form body with no canonical form (protocol.md H42): refused before the claim, so the
      // key is not spent and the same key with a well-formed body runs.
      if (error instanceof MalformedBodyError) {
        return this.problem(ProblemKind.MalformedBody, 400, `${error.message}; nothing was processed.`);
      }
      // A scope resolver that throws, or returns an invalid scope, is a bug in the app:
      // surface it to the framework's error handling. Nothing was claimed.
      throw error;
    }
    switch (begun.kind) {
      case 'replay': {
        // A cached record is the same object on every hit: its replay headers are built once.
        const shared = begun.cached === true && !this.expiresHeader;
        const stored = this.expiresHeader
          ? withHeader(begun.response, this.expiresHeader, httpDate(begun.record.createdAt.getTime() + this.engine.retentionMs))
          : begun.response;
        let response: Response | undefined;
        return {
          kind: 'respond',
          replayed: stored,
          get response() {
            response ??= shared ? cachedReplayResponse(stored) : replayResponse(stored);
            return response;
          },
        };
      }
      case 'mismatch':
        return this.problem(
          ProblemKind.KeyReused,
          this.options.mismatchStatus ?? 422,
          'This idempotency key was already used with a different request (method, path, query or body). Use a new key for a new request.',
        );
      case 'in-progress': {
        // Suggest a short wait (most work finishes well inside its lease), never past the lease.
        const leaseLeftS = Math.max(1, Math.ceil(begun.retryAfterMs / 1000));
        const seconds = Math.min(this.options.retryAfterS ?? 1, leaseLeftS);
        return this.problem(
          ProblemKind.InProgress,
          this.options.inProgressStatus ?? 409,
          'A request with this idempotency key is still being processed. Retry later with the same key.',
          {
            'retry-after': String(seconds),
          },
        );
      }
      case 'execute': {
        const ended = await this.attempts.start(begun.execution);
        if (ended) return { kind: 'respond', response: ended };
        if (this.options.storeRequests) {
          const failed = await this.saveRequest(begun.execution, request);
          if (failed) return { kind: 'respond', response: failed };
        }
        const context = new IdempotencyContext<Tx>(begun.execution, this.capture);
        return {
          kind: 'execute',
          context,
          complete: (response) => this.complete(context, response),
          completeHeld: (held) => this.completeHeld(context, held),
          fail: (error) => this.fail(context, error),
        };
      }
    }
  }

  /**
   * Reads a request's body whole, at most `maxBodyBytes` (protocol.md H27): the bytes (`null`
   * for none), or the 413 problem `request-too-large` to send instead (nothing was claimed).
   */
  async readBody(request: Request): Promise<Uint8Array | null | Response> {
    const limit = this.options.maxBodyBytes;
    if (limit === undefined) return request.body ? new Uint8Array(await request.arrayBuffer()) : null;
    const body = await readBodyWithin(request, limit);
    if (body !== undefined) return body;
    return this.problem(ProblemKind.RequestTooLarge, 413, `The request body is larger than ${limit} bytes; nothing was processed.`).response;
  }

  /**
   * Serves a web-standard request: reads the body once, rebuilds the request so the handler
   * can read it again, and runs `handler` under idempotency protection.
   *
   * @param handler receives the rebuilt request and the context (`undefined` when unprotected)
   */
  async handle(request: Request, handler: (request: Request, context: IdempotencyContext<Tx> | undefined) => Response | Promise<Response>): Promise<Response> {
    if (!this.protects(request.method)) return handler(request, undefined);
    const read = await this.readBody(request);
    if (read instanceof Response) return read;
    const body = read;
    const rebuilt = new Request(request.url, { method: request.method, headers: request.headers, body });
    const prepared = await this.prepare({ method: request.method, url: request.url, headers: request.headers, body });
    if (prepared.kind === 'pass') return handler(rebuilt, undefined);
    if (prepared.kind === 'respond') return prepared.response;
    let response: Response;
    try {
      response = await handler(rebuilt, prepared.context);
    } catch (error) {
      return prepared.fail(error);
    }
    return prepared.complete(response);
  }

  /**
   * Runs `handler` for an execution taken over without its client (a {@link Completer}),
   * with the same completion rules as a live request: the returned response is stored, a
   * throw releases the lease (recovery point kept), a lost lease stores nothing.
   *
   * @returns the response stored (or the problem a live client would have got)
   */
  async resume(
    execution: Execution<Tx>,
    request: Request,
    handler: (request: Request, context: IdempotencyContext<Tx>) => Response | Promise<Response>,
  ): Promise<Response> {
    const ended = await this.attempts.start(execution);
    if (ended) return ended;
    const context = new IdempotencyContext<Tx>(execution, this.capture);
    let response: Response;
    try {
      response = await handler(request, context);
    } catch (error) {
      return this.fail(context, error);
    }
    return this.complete(context, response);
  }

  /**
   * Stores the request snapshot before the handler runs (option `storeRequests`).
   * @returns a problem response when it could not be stored (the lease is then released), else undefined
   */
  private async saveRequest(execution: Execution<Tx>, request: HttpRequestInput): Promise<Response | undefined> {
    const url = new URL(request.url, 'http://idem.invalid');
    try {
      const saved = await execution.saveRequest({
        method: request.method.toUpperCase(),
        url: url.pathname + url.search,
        contentType: request.headers.get('content-type'),
        body: request.body,
      });
      if (saved) return undefined;
    } catch {
      await execution.release().catch(() => undefined);
      return this.storeUnavailable().response;
    }
    await execution.release().catch(() => undefined); // fenced: stops the heartbeat, reports lease-lost
    return this.attempts.leaseLost();
  }

  private async complete(context: IdempotencyContext<Tx>, response: Response): Promise<Response> {
    const execution = context.execution;
    if (execution.status === 'done') return this.withExpiry(response, execution); // the handler stored it via respond()
    if (execution.status === 'lost') return this.attempts.leaseLost();
    if (execution.status === 'released') return response;
    if (this.keepsNothing(context, response.status)) {
      // A rejection, or "try again later" (503): nothing happened, so nothing is kept; the
      // handler's Retry-After passes through (protocol.md H9).
      await execution.discard().catch(() => undefined); // if the store is down the lease just runs out
      return response;
    }
    let captured: Awaited<ReturnType<ResponseCapture>>;
    try {
      captured = await this.capture(response);
    } catch (error) {
      // The handler's body stream failed mid-way: as if the handler threw (lease released,
      // recovery point kept, idem's 500), never a framework's 500 over a key left in progress.
      return this.fail(context, error);
    }
    const { stored, response: sent } = captured;
    return (await this.record(execution, stored)) ?? this.withExpiry(sent, execution);
  }

  /** True when a response of `status` keeps nothing: a rejection or "try again later" before any work (protocol.md H9). */
  private keepsNothing(context: IdempotencyContext<Tx>, status: number): boolean {
    return !context.execution.workStarted && (context.rejected || this.discardStatuses.has(status) || this.releaseStatuses.has(status));
  }

  /** Finishes `execution` with `stored` (fenced): undefined when recorded, else the answer to send instead (409 lease lost, 503 store down). */
  private record(execution: Execution<Tx>, stored: StoredResponse): Promise<Response | undefined> {
    return this.attempts.record(execution, stored);
  }

  /**
   * {@link complete} for a held response. The common case (an open execution, a response to
   * keep, a body within `maxResponseBytes`, headers a web Response would carry unchanged) is
   * recorded straight from the parts, fenced as `complete` does; any other goes through
   * `complete` with the web Response built from the parts.
   */
  private async completeHeld(context: IdempotencyContext<Tx>, held: HeldResponse): Promise<Response | SendHeld> {
    const execution = context.execution;
    const { status, body } = held;
    const stored =
      execution.status === 'open' && !isNullBodyStatus(status) && body.length <= this.maxResponseBytes && !this.keepsNothing(context, status)
        ? storedHeaders(held.headers, this.keepHeader)
        : undefined;
    if (stored === undefined) return this.complete(context, bodyResponse(status, body, { headers: toHeaders(held.headers) }));
    const refused = await this.record(execution, { status, headers: stored, body });
    if (refused) return refused;
    const expiry = this.expiry(execution);
    return { kind: 'send-held', headers: expiry ? [[expiry[0].toLowerCase(), expiry[1]]] : [] };
  }

  /** The expiry header, name and value, when it is on and the retention end is known (protocol.md H40). */
  private expiry(execution: Execution<Tx>): [string, string] | undefined {
    return this.expiresHeader && execution.retentionEndsAt ? [this.expiresHeader, httpDate(execution.retentionEndsAt.getTime())] : undefined;
  }

  /** `response` with the expiry header when it is on and the retention end is known (protocol.md H40). */
  private withExpiry(response: Response, execution: Execution<Tx>): Response {
    const expiry = this.expiry(execution);
    if (expiry === undefined) return response;
    return withResponseHeader(response, expiry[0], expiry[1]);
  }

  private async fail(context: IdempotencyContext<Tx>, error: unknown): Promise<Response> {
    const execution = context.execution;
    if (!(error instanceof LeaseLostError || execution.status === 'lost')) (this.options.onHandlerError ?? defaultOnHandlerError)(error, context);
    return this.attempts.fail(execution, error);
  }

  /** The stored form of a response past `maxResponseBytes`: a 500 problem saying so. */
  private tooLarge(maxResponseBytes: number): StoredResponse {
    const problem = idemProblemParts(
      ProblemKind.ResponseTooLarge,
      500,
      `The request was executed, but its response was larger than ${maxResponseBytes} bytes and was not kept, so it cannot be replayed. Do not send this request again with a new key unless you mean to repeat it.`,
      this.problems,
    );
    const headers: Array<[string, string]> = [];
    for (const [name, value] of problem.headers) headers.push([name, value]);
    const body = new TextEncoder().encode(problem.text);
    return { status: 500, headers, body };
  }

  private storeUnavailable(): { kind: 'respond'; response: Response } {
    return { kind: 'respond', response: this.attempts.storeUnavailable() };
  }

  private problem(kind: ProblemKind, status: number, detail: string, headers?: Record<string, string>): { kind: 'respond'; response: Response } {
    return { kind: 'respond', response: idemProblem(kind, status, detail, this.problems, headers) };
  }
}

/** Default of `maxResponseBytes`: 32 MiB. */
export const DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024;

function defaultOnHandlerError(error: unknown): void {
  console.error('idem: handler failed', error);
}
