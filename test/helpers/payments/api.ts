/**
 * Talking to the example payments API in its end-to-end tests: HTTP/1.1 requests over fresh TCP
 * connections (no keep-alive), the charge and PSP endpoints, and assertions on its replies
 * (created, replayed, problem+json, in progress).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { checkProblem, PROBLEM } from '../problem.js';
import { eventually, sleep } from '../wait.js';
import type { Server } from './servers.js';

export const rand = (bytes = 6) => randomBytes(bytes).toString('hex');

/** Polls `fn` until `ok` accepts its value; fails after `timeoutMs` naming `what` and the last value. */
export async function until<T>(what: string, fn: () => Promise<T>, ok: (value: T) => boolean, timeoutMs = 15_000, intervalMs = 25): Promise<T> {
  try {
    return await eventually(fn, ok, { timeoutMs, everyMs: intervalMs });
  } catch (error) {
    assert.fail(`waiting for ${what}: ${(error as Error).message}`);
  }
}

/** Settles a promise into a value or an error, so a pending request can be checked later. */
export function settle<T>(promise: Promise<T>): Promise<{ ok: true; value: T } | { ok: false; error: unknown }> {
  return promise.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

// ---------------------------------------------------------------------------------------------
// HTTP over fresh TCP connections (no keep-alive: every request is its own connection)

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Exact body bytes. */
  body: Buffer;
  json(): unknown;
}

export function request(
  base: string,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: string | Buffer; chunked?: boolean } = {},
): Promise<Reply> {
  const url = new URL(path, base);
  const body = options.body === undefined ? undefined : Buffer.from(options.body);
  const chunked = options.chunked === true && body !== undefined;
  return new Promise((resolve, reject) => {
    const req = http.request(
      url,
      {
        method,
        agent: false,
        headers: {
          ...(chunked ? { 'transfer-encoding': 'chunked' } : body ? { 'content-length': String(body.length) } : {}),
          ...options.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const bytes = Buffer.concat(chunks);
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            body: bytes,
            json: () => JSON.parse(bytes.toString('utf8')),
          });
        });
      },
    );
    req.on('error', reject);
    if (chunked) {
      // No Content-Length: the server only learns the size by reading the stream.
      for (let i = 0; i < body.length; i += 16 * 1024) req.write(body.subarray(i, i + 16 * 1024));
      req.end();
    } else req.end(body);
  });
}

export interface ChargeBody {
  id: string;
  object: string;
  amount: number;
  currency: string;
  customer: string;
  status: string;
  psp_charge_id: string;
  metadata: Record<string, string>;
  created: number;
}

export interface PspCharge {
  id: string;
  idempotency_key: string;
  amount: number;
  currency: string;
  customer: string;
}

export interface PostOptions {
  apiKey?: string | null;
  key?: string | null;
  /** An object is sent as JSON; a string as is. */
  body: unknown;
  contentType?: string;
  /** Send the body chunked, without Content-Length. */
  chunked?: boolean;
}

export function postCharge(server: Server, o: PostOptions): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': o.contentType ?? 'application/json' };
  if (o.apiKey !== null) headers.authorization = `Bearer ${o.apiKey ?? 'sk_test_default'}`;
  if (o.key !== null && o.key !== undefined) headers['idempotency-key'] = o.key;
  const body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
  return request(server.url, 'POST', '/v1/charges', { headers, body, chunked: o.chunked });
}

export async function pspCharges(server: Server, customer: string): Promise<PspCharge[]> {
  const res = await request(server.url, 'GET', '/v1/psp/charges');
  assert.equal(res.status, 200, `GET /v1/psp/charges: ${res.body.toString()}`);
  const data = (res.json() as { data: PspCharge[] }).data;
  assert.ok(Array.isArray(data), `GET /v1/psp/charges: data is not an array: ${res.body.toString()}`);
  return data.filter((c) => c.customer === customer);
}

export async function getCharge(server: Server, apiKey: string, id: string): Promise<Reply> {
  return request(server.url, 'GET', `/v1/charges/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${apiKey}` } });
}

/** The local ledger row through the API: `GET /v1/charges/:id` agrees with the 201 `charge`. */
export async function assertLocalCharge(server: Server, apiKey: string, charge: ChargeBody): Promise<void> {
  const got = await getCharge(server, apiKey, charge.id);
  assert.equal(got.status, 200, `GET /v1/charges/${charge.id}: ${got.body.toString()}`);
  const row = got.json() as ChargeBody;
  assert.deepEqual(
    {
      id: row.id,
      amount: row.amount,
      currency: row.currency,
      customer: row.customer,
      status: row.status,
      psp: row.psp_charge_id,
      metadata: row.metadata,
      created: row.created,
    },
    {
      id: charge.id,
      amount: charge.amount,
      currency: charge.currency,
      customer: charge.customer,
      status: 'succeeded',
      psp: charge.psp_charge_id,
      metadata: charge.metadata,
      // Both come from the database's created_at: the POST and the GET show the same second.
      created: charge.created,
    },
  );
}

export { PROBLEM } from '../problem.js';

/** Asserts an idem problem reply of `status` whose type is the full URI `type`. */
export function assertProblem(res: Reply, status: number, type: string, message = ''): Record<string, unknown> {
  return checkProblem({ status: res.status, contentType: res.headers['content-type'], text: res.body.toString('utf8') }, status, type, message);
}

export function assertCreated(res: Reply, message = ''): ChargeBody {
  assert.equal(res.status, 201, `${message} expected 201, got ${res.status}: ${res.body.toString()}`);
  assert.match(String(res.headers['content-type']), /^application\/json/);
  const charge = res.json() as ChargeBody;
  assert.match(charge.id, /^ch_[0-9a-f]{32}$/);
  assert.equal(charge.object, 'charge');
  assert.equal(charge.status, 'succeeded');
  assert.match(charge.psp_charge_id, /^py_[0-9a-f]{32}$/);
  assert.equal(res.headers.location, `/v1/charges/${charge.id}`);
  return charge;
}

export function assertFresh(res: Reply, message = ''): ChargeBody {
  const charge = assertCreated(res, message);
  assert.equal(res.headers['idempotent-replayed'], undefined, `${message} a first execution is not marked as a replay`);
  return charge;
}

/** A replay: same status and byte-identical body as `original`, marked `Idempotent-Replayed: true`. */
export function assertReplayOf(res: Reply, original: Reply, message = ''): void {
  assert.equal(res.status, original.status, `${message} replay status: ${res.body.toString()}`);
  assert.equal(res.headers['idempotent-replayed'], 'true', `${message} replay header`);
  assert.ok(res.body.equals(original.body), `${message} replay body differs:\n${res.body}\nvs\n${original.body}`);
  assert.equal(res.headers['content-type'], original.headers['content-type'], message);
  assert.equal(res.headers.location, original.headers.location, message);
}

/** Retries until a 201; every answer in between must pass `between` (e.g. a 409 or 500 problem). */
export async function retryUntilCreated(
  send: () => Promise<Reply>,
  between: (res: Reply, attempt: number) => void,
  maxAttempts = 30,
  timeoutMs = 30_000,
): Promise<{ res: Reply; attempts: number; statuses: number[] }> {
  const deadline = Date.now() + timeoutMs;
  const statuses: number[] = [];
  for (let attempt = 1; attempt <= maxAttempts && Date.now() < deadline; attempt++) {
    const res = await send();
    statuses.push(res.status);
    if (res.status === 201) return { res, attempts: attempt, statuses };
    between(res, attempt);
    const retryAfter = Number(res.headers['retry-after']);
    // Honour Retry-After loosely (it is in whole seconds), but poll faster to keep tests short.
    await sleep(Number.isFinite(retryAfter) && retryAfter > 0 ? Math.min(retryAfter * 1000, 200) : 50);
  }
  assert.fail(`no 201 after ${statuses.length} attempts: statuses ${statuses.join(',')}`);
}

export function assertInProgress(res: Reply, message = ''): void {
  assertProblem(res, 409, PROBLEM + 'request-in-progress', message);
  const retryAfter = Number(res.headers['retry-after']);
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1, `${message} 409 needs Retry-After, got ${res.headers['retry-after']}`);
}
