/**
 * The example payments API: a Stripe-like `POST /v1/charges` protected by idem, with three
 * atomic phases (protocol.md K4):
 *   1. `charge_created`: insert the local charge row, committed with the recovery point;
 *   2. `psp_charged`: call the payment provider with a key derived from the client's key,
 *      and record its answer;
 *   3. finish: mark the charge succeeded and store the 201 in the same transaction.
 * A crash anywhere resumes from the last committed phase on the next retry, and the PSP
 * call, if repeated, is deduplicated by the derived key: one PSP charge per idempotency key.
 */
import { createHash, randomUUID } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { Completer, HttpIdempotency, type IdempotencyEvent, type IdempotencyContext, type IdempotencyOptions, problemResponse } from 'idem';
import { idempotency, type IdempotencyVariables } from 'idem/hono';
import type { IdempotencyTelemetry } from 'idem/otel';
import { MySqlStore } from 'idem/mysql';
import { PostgresStore, type Queryable, type SqlClient } from 'idem/postgres';
import type { IdempotencyStore } from 'idem';
import { isMySql, migrateMySqlExample, type MySqlDatabase } from './mysql.js';
import type { FakePsp } from './psp.js';
import { migrateExample } from './schema.js';
import { STATEMENTS } from './statements.js';
import { parseChargeRequest } from './validate.js';
import { paymentsOpenApi } from './openapi.js';

export interface PaymentsAppOptions {
  /**
   * The database (pg.Pool or PGlite, or MySQL: `mysqlDatabase(pool)` of mysql.ts); holds idem's
   * table, the charges and the fake PSP.
   */
  db: (SqlClient & Queryable) | MySqlDatabase;
  psp: FakePsp;
  /** idem lease in ms. @default 60_000 */
  leaseMs?: number;
  /** idem retention in ms. @default 86_400_000 */
  retentionMs?: number;
  /**
   * Fault injection for crash tests: SIGKILL this process at the named point
   * (`after_charge_created`, `psp_unrecorded` (the PSP charged, its result not yet recorded),
   * `after_psp`, `in_finish`). Never set in production.
   */
  crashAt?: string;
  /**
   * Fault injection for chaos runs: at every crash point, SIGKILL this process with this
   * probability (0-1). Never set in production. @default 0
   */
  crashRate?: number;
  /**
   * Store a snapshot of each charge request so a {@link Completer} can finish charges whose
   * client never retried (returned as `completer`). @default false
   */
  completer?: boolean;
  /** How long after its lease ended a key counts as abandoned, in ms (see `CompleterOptions.graceMs`). @default 0 */
  completerGraceMs?: number;
  /**
   * Where idem keeps its keys; phases must still hand out a transaction on `db` (a
   * `PostgresStore` on `db`, or `RedisStore` with `PostgresPhases` on `db`: see redis.ts).
   * @default new PostgresStore({ client: db }), or on MySQL new MySqlStore({ client: db.driver })
   */
  store?: IdempotencyStore<Queryable>;
  /**
   * `citus`: `db` is a Citus coordinator; idem's table and `charges` are distributed by the
   * tenant and co-located, so a charge's phases commit on one shard (run {@link migrate}
   * with the same option). Not with `waitMs` (wait mode's notify). @default undefined
   */
  distributed?: 'citus';
  /** idem's protocol events (claimed, taken-over, lease-lost, …), for logs and counters. */
  onEvent?: (event: IdempotencyEvent) => void;
  /**
   * Deadline in ms for the database to answer `/readyz`'s trivial query (and, through the
   * store, each of idem's statements). @default 5000
   */
  storeTimeoutMs?: number;
  /** OpenTelemetry spans and metrics (see otel.ts, `IDEM_OTEL=console`). */
  telemetry?: IdempotencyTelemetry;
  /**
   * Wait mode (protocol.md K17): a duplicate of a charge in progress waits up to this many ms
   * for its result instead of a 409 (the store then sends NOTIFY). @default 0
   */
  waitMs?: number;
}

type Env = { Variables: IdempotencyVariables<Queryable> & { tenant: string } };

/** Largest accepted charge request body, in bytes (a charge is a few hundred). */
const MAX_BODY_BYTES = 64 * 1024;

/** Where every problem points (`Link: </docs/errors>; rel="describedby"`, draft §2.7): served below. */
const DOCS_URL = '/docs/errors';
/** Stripe-compatible error members next to the RFC 9457 fields (stripe-node needs `error`), and the docs link. */
const FORMAT = { stripe: true, docsUrl: DOCS_URL } as const;
/** The problem types this API answers with, served at {@link DOCS_URL}. */
const PROBLEM_DOCS = {
  'urn:idem:problem:idempotency-key-missing': 'Send an Idempotency-Key header (a UUID per charge) with every POST /v1/charges.',
  'urn:idem:problem:idempotency-key-invalid': 'The Idempotency-Key must be 1-255 printable ASCII characters, sent once.',
  'urn:idem:problem:idempotency-key-reused': 'This key was used with a different request: use a new key for a new charge.',
  'urn:idem:problem:request-in-progress': 'The first request with this key is still running: retry after Retry-After seconds.',
  'urn:idem:problem:idempotency-store-unavailable': 'The database did not answer in time; nothing ran. Retry with the same key after Retry-After.',
  'urn:idem:problem:request-failed-retry': 'The charge failed mid-way; retry with the same key and it resumes.',
  'urn:idem:problem:request-failed-permanently': 'The charge failed on every attempt; it will not be tried again with this key.',
  'urn:idem:problem:idempotency-lease-lost': 'Another attempt took over; retry with the same key to get the outcome.',
  'urn:idem:example:payments:invalid-request': 'The charge request is invalid (see param and detail); fix it and reuse the key.',
  'urn:idem:example:payments:unauthenticated': 'Send your API key as "Authorization: Bearer <key>".',
  'urn:idem:example:payments:too-large': 'The request body is too large.',
  'urn:idem:example:payments:not-found': 'No such route or charge.',
  'urn:idem:example:payments:internal': 'The server failed; retry with the same Idempotency-Key.',
  'urn:idem:example:payments:not-ready': 'The database did not answer a trivial query within the deadline.',
};

/** Builds the app. Run `migrate` (store + example tables) before serving. */
export function createPaymentsApp(options: PaymentsAppOptions) {
  const { db, psp } = options;
  const waitMs = options.waitMs ?? 0;
  const sql = STATEMENTS[isMySql(db) ? 'mysql' : 'postgres'];
  // Each of idem's statements gets a deadline: a silent database answers 503 fast (protocol.md H17).
  const store: IdempotencyStore<Queryable> =
    options.store ??
    (isMySql(db)
      ? new MySqlStore({ client: db.driver, storeTimeoutMs: options.storeTimeoutMs ?? 5000 })
      : new PostgresStore({
          client: db,
          storeTimeoutMs: options.storeTimeoutMs ?? 5000,
          notify: waitMs > 0,
          ...(options.distributed ? { distributed: options.distributed } : {}),
        }));
  const crashRate = options.crashRate ?? 0;
  const crash = (point: string) => {
    if (options.crashAt === point || (crashRate > 0 && Math.random() < crashRate)) {
      // One line first (stdout to a pipe is synchronous on Linux), so a chaos supervisor can
      // tell a crash at a named point from one it injected from outside.
      if (crashRate > 0) console.log(`payments-crash ${point}`);
      process.kill(process.pid, 'SIGKILL');
    }
  };
  const idemOptions: IdempotencyOptions<Queryable> = {
    store,
    required: true,
    leaseMs: options.leaseMs,
    retentionMs: options.retentionMs,
    scope: (req) => tenantOf(req.headers)!,
    problems: FORMAT,
    // Each first answer and replay says when its key's record ends (protocol.md H40).
    expiresHeader: true,
    storeRequests: options.completer ?? false,
    ...(options.onEvent ? { onEvent: options.onEvent } : {}),
    ...(options.telemetry ? { telemetry: options.telemetry } : {}),
    ...(waitMs > 0 ? { inProgress: { wait: waitMs } } : {}),
    // One line per failed attempt; the client gets a 500 problem and its retry resumes.
    onHandlerError: (error) => console.error(`payments: charge attempt failed, lease released: ${(error as Error)?.message ?? error}`),
  };
  /**
   * `POST /v1/charges` for a claimed key, on the live route and in the completer alike: it
   * needs only the request's content type and body bytes, and takes the tenant from the
   * key's scope (the completer has no credentials).
   */
  async function createCharge(contentType: string | undefined, body: Uint8Array, idem: IdempotencyContext<Queryable>): Promise<Response> {
    const parsed = parseChargeRequest(contentType, body);
    if (!parsed.ok) {
      // Rejected before any phase: idem does not store it and frees the key (400 is a
      // discard status by default), so the client can fix the body and reuse the key.
      return problem(400, 'invalid-request', 'Invalid charge request', parsed.detail, parsed.param);
    }
    const req = parsed.value;
    const tenant = idem.scope; // the scope resolver returns the tenant

    const charge = await idem.phase('charge_created', async (tx) => {
      const id = 'ch_' + randomUUID().replaceAll('-', '');
      const { rows } = await tx.query(sql.insertCharge, [id, tenant, idem.key, req.amount, req.currency, req.customer, JSON.stringify(req.metadata)]);
      // `created` as Stripe shows it: whole seconds since the epoch, from the database clock.
      // MySQL has no RETURNING: read back. On PostgreSQL the seconds are computed here, not in
      // RETURNING: Citus allows only IMMUTABLE functions there, and extract() of a timestamptz is STABLE.
      if (sql.chargeCreated) return { id, created: Number((await tx.query(sql.chargeCreated, [id, tenant])).rows[0]!.created) };
      return { id, created: Math.floor(new Date(rows[0]!.created_at as string | Date).getTime() / 1000) };
    });
    crash('after_charge_created');

    const pspCharge = await idem.call('psp_charged', async (derivedKey) => {
      const result = await psp.charge({ idempotencyKey: derivedKey, amount: req.amount, currency: req.currency, customer: req.customer });
      crash('psp_unrecorded'); // the PSP charged, idem has not recorded it: only the derived key prevents a second charge
      return result;
    });
    crash('after_psp');

    return idem.respond(async (tx) => {
      // By tenant too: on Citus the update then goes to the tenant's shard alone, with the key row.
      await tx.query(`UPDATE charges SET status = 'succeeded', psp_charge_id = $2 WHERE id = $1 AND tenant = $3`, [charge.id, pspCharge.id, tenant]);
      crash('in_finish');
      return json(
        {
          id: charge.id,
          object: 'charge',
          amount: req.amount,
          currency: req.currency,
          customer: req.customer,
          status: 'succeeded',
          psp_charge_id: pspCharge.id,
          metadata: req.metadata,
          created: charge.created,
        },
        201,
        { location: `/v1/charges/${charge.id}` },
      );
    });
  }

  // Same options as the route's middleware, so completion follows the same rules.
  const completer = options.completer
    ? new Completer<Queryable>({
        http: new HttpIdempotency<Queryable>(idemOptions),
        graceMs: options.completerGraceMs ?? 0,
        run: async (req, idem) => createCharge(req.headers.get('content-type') ?? undefined, new Uint8Array(await req.arrayBuffer()), idem),
      })
    : undefined;

  const app = new Hono<Env>();

  // Liveness: the process answers. Readiness: the database answers a trivial query within
  // the deadline (503 while it is silent or down, 200 again as soon as it answers).
  app.get('/healthz', (c) => c.json({ ok: true }));
  const readyTimeoutMs = options.storeTimeoutMs ?? 5000;
  app.get('/readyz', async (c) => {
    const started = performance.now();
    try {
      await withDeadline(db.query('SELECT 1'), readyTimeoutMs);
      return c.json({ ok: true, database_ms: Math.round(performance.now() - started) });
    } catch (error) {
      return problem(
        503,
        'not-ready',
        'Database not ready',
        `The database did not answer within ${readyTimeoutMs} ms: ${(error as Error)?.message ?? error}`,
        undefined,
        { 'retry-after': '1' },
      );
    }
  });
  app.get(DOCS_URL, (c) => c.json({ problems: PROBLEM_DOCS }));
  // The API's contract, idem's included (openapi.ts).
  app.get('/openapi.json', (c) => c.json(paymentsOpenApi));

  // Tenant = the API key (`Authorization: Bearer <key>`). Only its hash is kept anywhere.
  // Authentication runs before idem, so a 401 leaves no trace (protocol.md H3).
  app.use('/v1/charges/*', authenticate);
  app.use('/v1/charges', authenticate);

  app.post(
    '/v1/charges',
    // Bounded before idem reads the body to fingerprint it: a 413 leaves no trace.
    bodyLimit({
      maxSize: MAX_BODY_BYTES,
      onError: () => problem(413, 'too-large', 'Request body too large', `Send at most ${MAX_BODY_BYTES} bytes.`),
    }),
    idempotency<Queryable>(idemOptions),
    async (c) => createCharge(c.req.header('content-type'), new Uint8Array(await c.req.arrayBuffer()), c.get('idem')!),
  );

  app.get('/v1/charges/:id', async (c) => {
    const { rows } = await db.query(sql.findCharge, [c.req.param('id'), c.get('tenant')]);
    if (!rows[0]) return problem(404, 'not-found', 'No such charge', `No charge ${c.req.param('id')} for this API key.`, 'id');
    const { id, metadata, created, ...rest } = rows[0];
    // MySQL keeps the metadata as JSON text (PostgreSQL's jsonb arrives parsed).
    return c.json({ id, object: 'charge', ...rest, metadata: typeof metadata === 'string' ? JSON.parse(metadata) : metadata, created: Number(created) });
  });

  // The provider's own ledger, open to anyone, so tests and humans can count charges.
  app.get('/v1/psp/charges', async (c) => c.json({ data: await psp.list() }));

  app.notFound((c) => problem(404, 'not-found', 'Not found', `No route for ${c.req.method} ${new URL(c.req.url).pathname}.`));
  app.onError((error, c) => {
    // Errors inside a protected request are reported by idem's onHandlerError (above).
    if (!c.get('idem')) console.error('payments: unhandled error', error);
    return problem(500, 'internal', 'Internal error', 'The server failed; retry with the same Idempotency-Key.');
  });

  return { app, store, completer };
}

/**
 * Creates idem's table and the example's tables; with `distributed: 'citus'`, distributed by
 * tenant and co-located (`store.distribute()`, then `charges` with `colocate_with`). Safe to
 * run on every start.
 */
export async function migrate(db: (Queryable & SqlClient) | MySqlDatabase, options: { distributed?: 'citus' } = {}): Promise<void> {
  if (isMySql(db)) {
    if (options.distributed) throw new Error('distributed: citus needs PostgreSQL');
    await new MySqlStore({ client: db.pool }).migrate();
    return migrateMySqlExample(db.pool);
  }
  const store = new PostgresStore({ client: db, ...options });
  await store.migrate();
  if (options.distributed) await store.distribute();
  await migrateExample(db, { colocateWith: options.distributed ? store.table : undefined });
}

async function authenticate(c: Context<Env>, next: () => Promise<void>) {
  const tenant = tenantOf(c.req.raw.headers);
  if (!tenant) {
    return problem(401, 'unauthenticated', 'API key required', 'Send your API key as "Authorization: Bearer <key>".', undefined, {
      'www-authenticate': 'Bearer',
    });
  }
  c.set('tenant', tenant);
  await next();
}

/** `tenant:<sha256 of the API key>`, or undefined without a bearer key. */
function tenantOf(headers: Headers): string | undefined {
  const match = /^Bearer\s+(\S{1,255})\s*$/i.exec(headers.get('authorization') ?? '');
  if (!match) return undefined;
  return 'tenant:' + createHash('sha256').update(match[1]!).digest('base64url');
}

/** Resolves like `promise`, or rejects once `ms` have passed (the query itself is left to its own timeouts). */
function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  promise.catch(() => undefined); // a late failure after the deadline is not unhandled
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/** A JSON response, as `c.json` would make it, for code that also runs outside a route (the completer). */
function json(value: unknown, status: number, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json', ...headers } });
}

function problem(status: number, kind: string, title: string, detail: string, param?: string, headers?: Record<string, string>) {
  const stripeType = status === 401 ? 'authentication_error' : status >= 500 ? 'api_error' : 'invalid_request_error';
  return problemResponse(
    { type: `urn:idem:example:payments:${kind}`, title, status, detail },
    { ...FORMAT, stripeError: { type: stripeType, message: detail, ...(param ? { param } : {}) } },
    headers,
  );
}
