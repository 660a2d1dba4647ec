/**
 * Shared helpers of the HTTP-layer tests (test/http, test/hono, test/express): inspecting the
 * key table, asserting idem's problem responses, controllable promises, an unreachable store.
 */
import assert from 'node:assert/strict';
import pg from 'pg';
import type { Queryable } from '../../src/postgres/client.js';
import { PostgresStore } from '../../src/postgres/index.js';
import { checkProblem, PROBLEM, type ProblemBody } from './problem.js';

/** Prefix of every problem type idem emits. */
export { PROBLEM } from './problem.js';

/** A promise resolved from outside, to hold a handler mid-work. */
export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** One row of the key table, as the tests inspect it. */
export interface KeyRow {
  scope: string;
  key: string;
  state: string;
  recovery_point: string;
  lock_version: string;
  fingerprint: string;
  response_status: number | null;
  response_body: string | null;
  response_headers: unknown;
  locked: boolean;
}

/** A key row as a store's backdoor SQL returns it (KeyRow's column names, the driver's own types) as a {@link KeyRow}. */
export function toKeyRow(r: Record<string, unknown>): KeyRow {
  return {
    scope: String(r.scope),
    key: String(r.key),
    state: String(r.state),
    recovery_point: String(r.recovery_point),
    lock_version: String(r.lock_version),
    fingerprint: String(r.fingerprint),
    response_status: r.response_status === null ? null : Number(r.response_status),
    response_body: r.response_body === null ? null : String(r.response_body),
    response_headers: r.response_headers === null ? null : JSON.parse(String(r.response_headers)),
    locked: Number(r.locked) === 1,
  };
}

export async function keyRows(client: Queryable, table: string): Promise<KeyRow[]> {
  const { rows } = await client.query(
    `SELECT scope, key, state, recovery_point, lock_version::text AS lock_version,
       encode(fingerprint, 'hex') AS fingerprint, response_status, encode(response_body, 'hex') AS response_body,
       response_headers, (locked_until IS NOT NULL AND locked_until > now()) AS locked
     FROM "${table}" ORDER BY scope, key`,
  );
  return rows as unknown as KeyRow[];
}

export async function countRows(client: Queryable, table: string): Promise<number> {
  const { rows } = await client.query(`SELECT count(*)::int AS n FROM "${table}"`);
  return Number(rows[0]!.n);
}

/** Every column of every row as text: for checking that a value is stored nowhere. */
export async function tableText(client: Queryable, table: string): Promise<string> {
  const { rows } = await client.query(`SELECT t::text AS t FROM "${table}" t`);
  return rows.map((r) => String(r.t)).join('\n');
}

/**
 * Asserts an idem problem response (protocol.md H20): `application/problem+json`, valid JSON,
 * `status` equal to the HTTP status, `type` the given kind. Consumes the body.
 */
export async function assertProblem(response: Response, status: number, kind: string): Promise<ProblemBody> {
  const text = await response.text();
  const contentType = response.headers.get('content-type');
  const body = checkProblem({ status: response.status, contentType, text }, status, PROBLEM + kind);
  assert.equal(contentType, 'application/problem+json', 'exactly, without parameters');
  return body;
}

export function hex(bytes: Uint8Array | ArrayBuffer): string {
  return Buffer.from(bytes instanceof ArrayBuffer ? new Uint8Array(bytes) : bytes).toString('hex');
}

export { poll } from './wait.js';

/** A PostgresStore on a pool that can never connect (nothing listens on port 1). */
export function unreachableStore(): { store: PostgresStore; close(): Promise<void> } {
  const pool = new pg.Pool({
    host: '127.0.0.1',
    port: 1,
    user: 'nobody',
    database: 'nothing',
    connectionTimeoutMillis: 300,
    max: 1,
  });
  pool.on('error', () => undefined);
  return { store: new PostgresStore({ client: pool, table: 'idem_unreachable' }), close: () => pool.end() };
}

/** The invalid keys of protocol.md H5 that any client can send, with a name for the test title. */
export const INVALID_KEYS: Array<[string, string]> = [
  ['an empty key', ''],
  ['a 256-character key', 'k'.repeat(256)],
  ['a non-ASCII key', 'café-1'],
  ['a key with a control character (tab)', 'a\tb'],
  ['a malformed sf-string (unterminated)', '"abc'],
  ['a malformed sf-string (trailing characters)', '"abc"def'],
  ['an sf-string with parameters', '"abc";v=1'],
];

/** What a test sends: a method (POST by default), a key, and a JSON or raw body. */
export interface Send {
  method?: string;
  key?: string;
  json?: unknown;
  body?: string | Uint8Array;
  headers?: Record<string, string>;
}

/** The fetch init for a {@link Send}: `json` sets the body and `content-type: application/json`. */
export function requestInit(send: Send = {}): RequestInit {
  const headers = new Headers(send.headers);
  if (send.key !== undefined) headers.set('Idempotency-Key', send.key);
  let body: string | Uint8Array | undefined = send.body;
  if (send.json !== undefined) {
    body = JSON.stringify(send.json);
    headers.set('content-type', 'application/json');
  }
  return { method: send.method ?? 'POST', headers, body: body ?? null };
}

/** The whole body of a response, as bytes. */
export const bytes = async (response: Response): Promise<Uint8Array> => new Uint8Array(await response.arrayBuffer());

/** Work that holds its key until `gate` is resolved: `entered` resolves when it starts, `runs()` counts its starts. */
export function gatedWork<T>(result: () => T): { gate: Deferred<void>; entered: Deferred<void>; runs(): number; work(): Promise<T> } {
  const gate = deferred<void>();
  const entered = deferred<void>();
  let runs = 0;
  return {
    gate,
    entered,
    runs: () => runs,
    async work() {
      runs++;
      entered.resolve();
      await gate.promise;
      return result();
    },
  };
}
