/**
 * The chaos harness's view of idem's keys, wherever the workers keep them: the PostgreSQL
 * table `idempotency_keys`, the MySQL one (`--store mysql`), or (`--store redis`) the hashes
 * under a Redis key prefix.
 */
import { createClient } from '@redis/client';
import type pg from 'pg';
import type { Queryable } from '../../src/postgres/index.js';

/** A key as the invariants read it. */
export interface KeyRow {
  state: string;
  response_body: Uint8Array | null;
  /** Redis only: lease end, server epoch ms (0: released, no lease). */
  leaseEndMs?: number;
}

export interface KeysView {
  /** Started keys whose lease ended more than `overdueMs` ago. */
  overdueStarted(overdueMs: number): Promise<number>;
  /** Every key by its idempotency key. */
  all(): Promise<Map<string, KeyRow>>;
  /** Keys still `started`. */
  started(): Promise<number>;
  close(): Promise<void>;
}

/** The PostgreSQL store's table. */
export function postgresKeys(pool: pg.Pool): KeysView {
  return {
    async overdueStarted(overdueMs) {
      const r = await pool.query(
        `SELECT count(*)::int AS n FROM idempotency_keys WHERE state = 'started' AND locked_until < now() - $1::int8 * interval '1 millisecond'`,
        [overdueMs],
      );
      return Number(r.rows[0]!.n);
    },
    async all() {
      return new Map((await pool.query(`SELECT key, state, response_body FROM idempotency_keys`)).rows.map((r) => [String(r.key), r as KeyRow]));
    },
    async started() {
      return Number((await pool.query(`SELECT count(*)::int AS n FROM idempotency_keys WHERE state = 'started'`)).rows[0]!.n);
    },
    close: async () => undefined,
  };
}

/** The MySQL store's table (`MySqlStore`): keys are VARBINARY, times against the server's UTC clock. */
export function mysqlKeys(db: Queryable): KeysView {
  return {
    async overdueStarted(overdueMs) {
      const r = await db.query(
        `SELECT count(*) AS n FROM idempotency_keys WHERE state = 'started' AND locked_until < UTC_TIMESTAMP(6) - INTERVAL $1 MICROSECOND`,
        [Math.round(overdueMs * 1000)],
      );
      return Number(r.rows[0]!.n);
    },
    async all() {
      const { rows } = await db.query('SELECT `key`, state, response_body FROM idempotency_keys');
      return new Map(
        rows.map((r) => [Buffer.from(r.key as Uint8Array).toString('utf8'), { state: String(r.state), response_body: r.response_body as Uint8Array | null }]),
      );
    },
    async started() {
      return Number((await db.query(`SELECT count(*) AS n FROM idempotency_keys WHERE state = 'started'`)).rows[0]!.n);
    },
    close: async () => undefined,
  };
}

/** The Redis store's hashes under `prefix` on the Redis at `url` (single Redis). */
export async function redisKeys(url: string, prefix: string): Promise<KeysView> {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  const scan = async () => {
    const out = new Map<string, KeyRow>();
    let cursor = '0';
    do {
      const [next, names] = (await client.sendCommand(['SCAN', cursor, 'MATCH', `${prefix}:{*}`, 'COUNT', '1000'])) as [string, string[]];
      cursor = String(next);
      for (const name of names) {
        const [state, body, lu] = (await client.sendCommand(['HMGET', name, 'st', 'rb', 'lu'])) as [string | null, string | null, string | null];
        // `<prefix>:{<scope with : escaped>:<key>}`: the key follows the first bare ':'.
        const inner = name.slice(prefix.length + 2, -1);
        const sep = inner.search(/(?<!\\):/);
        out.set(inner.slice(sep + 1), {
          state: state ?? '',
          response_body: body === null ? null : new Uint8Array(Buffer.from(body, 'base64')),
          leaseEndMs: Number(lu ?? 0),
        });
      }
    } while (cursor !== '0');
    return out;
  };
  return {
    async overdueStarted(overdueMs) {
      // As the PostgreSQL query: a lease that ended more than overdueMs ago; a released key
      // (no lease, like locked_until NULL) is not counted.
      const [s, us] = (await client.sendCommand(['TIME'])) as [string, string];
      const nowMs = Number(s) * 1000 + Math.floor(Number(us) / 1000);
      return [...(await scan()).values()].filter((r) => r.state === 'started' && r.leaseEndMs! > 0 && r.leaseEndMs! < nowMs - overdueMs).length;
    },
    all: scan,
    async started() {
      return [...(await scan()).values()].filter((r) => r.state === 'started').length;
    },
    close: async () => void client.destroy(),
  };
}

/** Deletes every key under `prefix` (after a run). */
export async function dropRedisPrefix(url: string, prefix: string): Promise<void> {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    let cursor = '0';
    do {
      const [next, names] = (await client.sendCommand(['SCAN', cursor, 'MATCH', `${prefix}:*`, 'COUNT', '1000'])) as [string, string[]];
      cursor = String(next);
      if (names.length > 0) await client.sendCommand(['DEL', ...names]);
    } while (cursor !== '0');
  } finally {
    client.destroy();
  }
}
