import type { EngineOptions, IdempotencyEngine } from '../engine/engine.js';
import type { IdempotencyContext } from './context.js';
import type { ProblemFormat } from './problem.js';

/** A request as the HTTP core sees it, whatever the framework. */
export interface HttpRequestInput {
  /** HTTP method, any case. */
  method: string;
  /** Absolute URL, or path with query (`/v1/charges?expand=x`). */
  url: string;
  headers: Headers;
  /** Raw body bytes, read once; `null` for none. */
  body: Uint8Array | null;
  /**
   * The key header's lines as sent, when the runtime keeps repeated lines apart (Node's
   * `req.headersDistinct`); lets two `Idempotency-Key` lines be rejected (protocol.md H5).
   */
  keyHeaderLines?: string[] | undefined;
}

/** Options of the HTTP layer (all adapters take these). Durations are in ms. */
export interface IdempotencyOptions<Tx = unknown> extends Omit<EngineOptions<Tx>, 'store'> {
  /** Where keys live, e.g. `new PostgresStore({ client })`. Give either `store` or `engine`. */
  store?: EngineOptions<Tx>['store'];
  /** A shared engine (then lease, retention and `replayCache` options come from it). */
  engine?: IdempotencyEngine<Tx>;
  /**
   * Methods protected; a key on any other method is ignored (protocol.md H1).
   * @default ['POST', 'PATCH']
   */
  methods?: string[];
  /**
   * Require a key: a protected request without one gets 400, and the handler does not run
   * (protocol.md H2). Without it, such a request passes through unprotected.
   * @default false
   */
  required?: boolean;
  /**
   * Request header carrying the key, e.g. `PayPal-Request-Id` (protocol.md H4).
   * @default 'Idempotency-Key'
   */
  keyHeader?: string;
  /** @deprecated renamed {@link keyHeader} (the client's option has the same name); used when `keyHeader` is not set. */
  headerName?: string;
  /**
   * Takes the key from somewhere else, e.g. a body field (EC2 `ClientToken` style). Return
   * `undefined` for none. A key from data (protocol.md K47): any non-empty string, stored as
   * is when 1-255 printable ASCII, else as `sha256:` and its hex digest (`dataKey`); `''` or a
   * non-string gets 400. Replaces the header: a request whose key header carries a
   * different key gets 400 (two keys for one request are ambiguous).
   */
  getKey?: (request: HttpRequestInput) => string | undefined;
  /**
   * With `getKey`: the key header is not read at all, so a key header next to the key `getKey`
   * found is no conflict. For a form whose page sets its key in a hidden field while the browser
   * adds its own random `Idempotency-Key` (Firefox with `network.http.idempotencyKey.enabled`;
   * protocol.md H42). Only with `getKey`. @default false
   */
  ignoreKeyHeader?: boolean;
  /**
   * Resolves the scope (tenant / API credential) of a request (protocol.md H6). The default
   * hashes the `Authorization` header, safe without configuration.
   */
  scope?: (request: HttpRequestInput) => string | Promise<string>;
  /** Request headers that are part of the fingerprint, e.g. `['Stripe-Version']` (protocol.md H7). @default [] */
  fingerprintHeaders?: string[];
  /**
   * RFC 6901 JSON pointers removed from a JSON body before it is fingerprinted, for members
   * that change on every send without changing the request, e.g. `['/id']` for a JSON-RPC
   * envelope (protocol.md K2). @default []
   */
  fingerprintIgnore?: readonly string[];
  /**
   * Projects a parsed JSON body to the part that identifies the request, before it is
   * fingerprinted (after `fingerprintIgnore`), e.g. `(rpc) => ({ method: rpc.method, params:
   * rpc.params })`. Must be pure. Applies to JSON bodies only.
   */
  fingerprintProjection?: (body: unknown) => unknown;
  /**
   * How many recent requests' fingerprints are remembered by a SHA-256 of their raw bytes
   * (protocol.md H29), so a byte-identical retry is not parsed and canonicalised again. The
   * fingerprint a request gets is the same either way, and it is compared on every replay.
   * `0` turns it off. JSON and form bodies only (other bodies are hashed raw already).
   * @default 4096
   */
  fingerprintMemo?: number;
  /** Response headers stored and replayed; Set-Cookie, Authorization and the like are never stored. */
  replayHeaders?: string[];
  /**
   * The expiry signal (protocol.md H40): the first response of a key and every replay carry
   * the end of the key's retention as an HTTP-date, so a client knows until when a retry with
   * this key is answered from its record. `true`: `Idempotency-Key-Expires`; a string: that
   * header name. Computed when sent, never stored. Off by default (the header is not in the
   * draft yet, and it tells clients the retention).
   * @default false
   */
  expiresHeader?: boolean | string;
  /**
   * Status for a key reused with a different request: 422 (draft), 400 (Stripe) or 409
   * (Brandur Leach).
   * @default 422
   */
  mismatchStatus?: 400 | 409 | 422;
  /**
   * Status for a key whose first request still runs (and, in wait mode, for a wait that ran
   * out): 409 (the IETF draft) or 423 Locked (what the idemkit vectors expect). The problem,
   * its `Retry-After` and its next step are the same (protocol.md H13).
   * @default 409
   */
  inProgressStatus?: 409 | 423;
  /**
   * A handler that throws: `release` ends the lease and keeps the recovery point, the client
   * gets a 500 problem and its retry resumes (protocol.md H10); `store` stores that 500 and
   * replays it (Stripe).
   * @default 'release'
   */
  onThrow?: 'release' | 'store';
  /**
   * Failed attempts (the handler threw) a key may have over its life, counted in its row
   * whether a client retried or a completer ran it. At the last one the key is finished with
   * a stored 500 problem `urn:idem:problem:request-failed-permanently`, replayed from then on,
   * and no completer picks it up again. Failures of the infrastructure (store unreachable or
   * past its deadline, dropped connections, serialization conflicts) and errors with
   * `transient: true` (mark a downstream outage so) do not count. `Infinity`
   * turns it off. Every idem store counts (`countFailure`, protocol.md K46).
   * @default 5
   */
  maxAttempts?: number;
  /**
   * Statuses that mean "rejected before work started" when no atomic phase has committed:
   * not stored, claim deleted, the client may retry with the same key (protocol.md K10). After a phase has committed every response is stored (protocol.md H9).
   * @default [400, 401, 403, 422, 429]
   */
  discardStatuses?: number[];
  /**
   * Statuses that mean "try again later" (RFC 9110 §15.6.4) when no atomic phase has
   * committed: not stored, claim deleted, the response (with the handler's `Retry-After`)
   * passed through, so the retry runs the handler again. After a phase has committed they
   * are stored like any other response. Other 5xx a handler returns are always stored.
   * @default [503]
   */
  releaseStatuses?: number[];
  /**
   * The most response body bytes buffered to store one response. A larger response still
   * reaches this client in full, streamed; the key is finished with a stored 500 problem
   * `urn:idem:problem:response-too-large-to-keep` that retries get, and the handler never
   * runs again for that key.
   * @default 33_554_432 (32 MiB)
   */
  maxResponseBytes?: number;
  /**
   * The most request body bytes {@link HttpIdempotency.handle} (fetch-style runtimes) and
   * `idem/webhooks` read: a larger body is answered 413 `application/problem+json`
   * (`urn:idem:problem:request-too-large`) before anything is claimed, and never buffered past
   * the limit (protocol.md H27). Adapters that receive a parsed body (Express, Fastify, Koa,
   * Lambda) leave the limit to their framework.
   * @default no limit (webhook receivers: 26_214_400, 25 MiB)
   */
  maxBodyBytes?: number;
  /**
   * `Retry-After` of a 409 "in progress", in seconds, clamped to the lease left (protocol.md H13).
   * @default 1
   */
  retryAfterS?: number;
  /** Format of idem's own error bodies (Stripe `error` member, docs link). */
  problems?: ProblemFormat;
  /**
   * Store a snapshot of each protected request (method, path with query, content type, body
   * bytes; never `Authorization` or `Cookie`) with its key, before the handler runs, so a
   * {@link Completer} can finish work whose client never retried. Costs one fenced write per
   * execution. Needs a store with `saveRequest` (the PostgreSQL store has it).
   * @default false
   */
  storeRequests?: boolean;
  /** Called with every error a handler throws (after the client's response is decided). @default console.error */
  onHandlerError?: (error: unknown, context: IdempotencyContext<Tx>) => void;
}
