/**
 * Network partitions (issue 44, item 2), with network namespaces: the test starts its own
 * PostgreSQL inside a namespace, on the namespace's address, reached over a veth pair, and drops
 * the link's packets with nftables for a set time, one way or both. TCP connections stay open;
 * packets vanish (no RST, no closed socket) — the fault a TCP proxy cannot make.
 *
 * app ↔ PostgreSQL: requests through the Hono middleware on PostgresStore (storeTimeoutMs) while
 * the partition is on get 503 or wait; once it heals every key reaches a final answer, and the
 * effect rows (written in the phase's transaction) number exactly one per key.
 *
 * Gated on the full matrix and root; where namespaces or nft are missing, the suite says so and
 * skips. Numbers: docs/reliability.md, "Partitions".
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { idempotency, type IdempotencyVariables } from '../src/hono/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import { honoApp } from './helpers/adapter-harness.js';
import { createNetns, partitionSkip, removeStale, startPostgres, type Direction, type Netns, type NsPostgres } from './helpers/netns.js';
import { requestInit } from './helpers/http.js';
import { fullMatrixOnly } from './helpers/services.js';
import { poll, sleep } from './helpers/wait.js';
import type { Context } from 'hono';

const SKIP = fullMatrixOnly() || partitionSkip({ postgres: true });
const PREFIX = 'idempart';
/** How long each partition lasts: a set time, by design. */
const PARTITION_MS = 5000;
const LEASE_MS = 3000;
const STORE_TIMEOUT_MS = 1000;
const KEYS = 24;
/** Every key must have its final answer within this long after the partition heals. */
const HEAL_BOUND_MS = 40_000;

/** What one partitioned run saw, printed for docs/reliability.md. */
interface Figures {
  direction: Direction;
  operations: number;
  statuses: Record<string, number>;
  duplicates: number;
  lost: number;
  unanswered: number;
  healMs: number;
}

describe('partition: app ↔ PostgreSQL (network namespace, nftables)', { skip: SKIP }, () => {
  let ns: Netns;
  let server: NsPostgres;
  let admin: pg.Pool;
  before(async () => {
    removeStale(PREFIX);
    ns = createNetns(PREFIX);
    server = startPostgres(ns);
    admin = new pg.Pool({ connectionString: server.url, max: 2 });
    admin.on('error', () => undefined);
    // Readiness: the first query that answers.
    await poll(
      () =>
        admin.query('SELECT 1').then(
          () => true,
          () => undefined,
        ),
      60_000,
      'PostgreSQL in the namespace',
      100,
    );
  });
  after(async () => {
    ns?.heal();
    await admin?.end().catch(() => undefined);
    await server?.stop();
    ns?.destroy();
  });

  async function run(direction: Direction, table: string): Promise<Figures> {
    await admin.query(`CREATE TABLE "${table}_effects" (key text NOT NULL, at timestamptz NOT NULL DEFAULT now())`);
    const pool = new pg.Pool({ connectionString: server.url, max: 8 });
    pool.on('error', () => undefined);
    const store = new PostgresStore({ client: pool, table, storeTimeoutMs: STORE_TIMEOUT_MS });
    await store.migrate();
    const app = honoApp();
    let entered = 0;
    app.post(
      '/v1/charges',
      idempotency<Queryable>({ store, leaseMs: LEASE_MS, onHandlerError: () => undefined }),
      async (c: Context<{ Variables: IdempotencyVariables<Queryable> }>) => {
        entered++;
        const idem = c.get('idem')!;
        const key = c.req.header('idempotency-key')!;
        // The effect commits with the phase, in one transaction (protocol.md: phases): a retry replays it.
        await idem.phase('charge', async (tx) => {
          await tx.query(`INSERT INTO "${table}_effects" (key) VALUES ($1)`, [key]);
          return key;
        });
        await sleep(20); // work between the phase and the finish, so the partition meets both
        return c.json({ charged: key }, 201);
      },
    );

    const statuses: Record<string, number> = {};
    const answers = new Map<string, string>();
    let operations = 0;
    let stop = false;
    const client = async (key: string) => {
      while (!stop) {
        operations++;
        let status = 'error';
        try {
          const res = await app.request('/v1/charges', requestInit({ key, json: { key } }));
          status = String(res.status);
          const text = await res.text();
          if (res.status === 201) {
            const first = answers.get(key);
            if (first === undefined) answers.set(key, text);
            else assert.equal(text, first, `${key}: every ok answer is the same`);
          }
        } catch {}
        statuses[status] = (statuses[status] ?? 0) + 1;
        if (status === '201') return;
        await sleep(100); // the client's retry backoff
      }
    };
    const keys = Array.from({ length: KEYS }, (_, i) => `${direction}-${i}`);
    // Keys start a little apart, so the partition meets claims, phases and finishes.
    const clients = keys.map(async (key, i) => {
      await sleep(i * 40);
      await client(key);
    });
    await poll(() => (entered >= 4 ? true : undefined), 30_000, 'the first handlers running');
    ns.partition(direction);
    const cutAt = Date.now();
    await sleep(PARTITION_MS); // the partition's set length
    const during = { ...statuses };
    ns.heal();
    const healedAt = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, HEAL_BOUND_MS)));
    await Promise.race([Promise.all(clients), bound]);
    clearTimeout(timer);
    stop = true;
    const healMs = Date.now() - healedAt;
    await Promise.all(clients);
    await pool.end();
    const rows = (await admin.query<{ key: string; n: number }>(`SELECT key, count(*)::int AS n FROM "${table}_effects" GROUP BY key`)).rows;
    const effects = new Map(rows.map((r) => [r.key, r.n]));
    const figures: Figures = {
      direction,
      operations,
      statuses,
      duplicates: rows.reduce((sum, r) => sum + Math.max(0, r.n - 1), 0),
      lost: [...answers.keys()].filter((key) => (effects.get(key) ?? 0) === 0).length,
      unanswered: keys.filter((key) => !answers.has(key)).length,
      healMs,
    };
    console.log(`partition app↔postgres ${direction} ${healedAt - cutAt} ms: ${JSON.stringify(figures)}`);
    assert.ok(
      Object.keys(during).some((s) => s !== '201'),
      `the partition was felt: some request got no 201 while it was on (${JSON.stringify(during)})`,
    );
    assert.equal(figures.unanswered, 0, `every key has its final answer within ${HEAL_BOUND_MS} ms of the heal`);
    assert.equal(figures.duplicates, 0, 'at most one effect per key');
    assert.equal(figures.lost, 0, 'every acknowledged key has its effect');
    for (const key of keys) assert.equal(effects.get(key), 1, `${key}: exactly one effect`);
    return figures;
  }

  it('one of two instances cut from the database: the other takes its leases over after expiry; the zombie’s late phase commit is fenced when it heals', {
    timeout: 90_000,
  }, async () => {
    const table = `idem_part_zombie_${process.pid}`;
    await admin.query(`CREATE TABLE "${table}_effects" (key text NOT NULL, by text NOT NULL)`);
    const keys = ['z-0', 'z-1', 'z-2'];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const entered = new Set<string>();
    /** One app instance: its own pool (connections kept open) and store, on the same table. */
    const instance = (by: 'zombie' | 'taker', max: number) => {
      const pool = new pg.Pool({ connectionString: server.url, max, idleTimeoutMillis: 0 });
      pool.on('error', () => undefined);
      const ports = new Set<number>();
      pool.on('connect', (client) => {
        const port = (client as unknown as { connection: { stream: { localPort?: number } } }).connection.stream.localPort;
        if (port) ports.add(port);
      });
      // The zombie has no deadline of its own: its writes wait out the partition and arrive late.
      const store = new PostgresStore({ client: pool, table, storeTimeoutMs: by === 'zombie' ? 0 : STORE_TIMEOUT_MS });
      const app = honoApp();
      app.post(
        '/v1/charges',
        idempotency<Queryable>({ store, leaseMs: LEASE_MS, onHandlerError: () => undefined }),
        async (c: Context<{ Variables: IdempotencyVariables<Queryable> }>) => {
          const idem = c.get('idem')!;
          const key = c.req.header('idempotency-key')!;
          if (by === 'zombie') {
            entered.add(key);
            await gate; // the partition starts while the zombie holds the lease
          }
          const charged = await idem.phase('charge', async (tx) => {
            await tx.query(`INSERT INTO "${table}_effects" (key, by) VALUES ($1, $2)`, [key, by]);
            return by;
          });
          return c.json({ key, charged }, 201);
        },
      );
      const send = (key: string) => app.request('/v1/charges', requestInit({ key, json: { key } }));
      return { pool, ports, store, send };
    };
    const zombie = instance('zombie', 4);
    const taker = instance('taker', 4);
    await zombie.store.migrate();
    // Open the zombie's connections before the cut, so every one of them is partitioned.
    await Promise.all(Array.from({ length: 4 }, () => zombie.pool.query('SELECT pg_sleep(0.05)')));
    const zombieAnswers = keys.map((key) => Promise.resolve(zombie.send(key)).then(async (res) => ({ status: res.status, body: await res.text() })));
    await poll(() => (entered.size === keys.length ? true : undefined), 30_000, 'the zombie holding every lease');
    ns.partition('both', [...zombie.ports]);
    const cutAt = Date.now();
    release();
    // The taker retries each key until it answers: 409 while the zombie's lease runs, then takes over.
    const takerAnswers = new Map<string, { status: number; body: string }>();
    let takerOps = 0;
    await Promise.all(
      keys.map(async (key) => {
        for (;;) {
          takerOps++;
          const res = await taker.send(key);
          const body = await res.text();
          if (res.status === 201) return void takerAnswers.set(key, { status: res.status, body });
          await sleep(100); // the client's retry backoff
        }
      }),
    );
    const takenMs = Date.now() - cutAt;
    // The partition lasts its set time past the takeover, then heals: the zombie's writes arrive.
    await sleep(Math.max(0, PARTITION_MS + LEASE_MS - takenMs));
    ns.heal();
    const healedAt = Date.now();
    const late = await Promise.all(zombieAnswers);
    const healMs = Date.now() - healedAt;
    const rows = (await admin.query<{ key: string; by: string }>(`SELECT key, by FROM "${table}_effects" ORDER BY key`)).rows;
    const replays = await Promise.all(keys.map(async (key) => (await taker.send(key)).text()));
    console.log(
      `partition zombie ${healedAt - cutAt} ms: ${JSON.stringify({ keys: keys.length, takerOps, takenMs, zombie: late.map((a) => a.status), effects: rows.length, healMs })}`,
    );
    await Promise.all([zombie.pool.end(), taker.pool.end()]);
    assert.deepEqual(
      rows.map((r) => `${r.key}:${r.by}`),
      keys.map((key) => `${key}:taker`),
      'one effect per key, the taker’s: the zombie’s late phase commit was fenced',
    );
    for (const [i, key] of keys.entries()) {
      assert.deepEqual(JSON.parse(takerAnswers.get(key)!.body), { key, charged: 'taker' });
      assert.equal(replays[i], takerAnswers.get(key)!.body, `${key}: the store keeps the taker’s answer`);
      assert.notEqual(late[i]!.status, 201, `${key}: the zombie answers no success of its own (${late[i]!.status} ${late[i]!.body})`);
    }
  });

  for (const direction of ['both', 'to-ns'] as const) {
    it(`dropped ${direction === 'both' ? 'both ways' : 'toward the database only'} for ${PARTITION_MS} ms mid-load: 503 or wait, then every key answered once, 0 duplicate and 0 lost effects`, {
      timeout: 90_000,
    }, async () => {
      await run(direction, `idem_part_${direction.replace('-', '_')}_${process.pid}`);
    });
  }
});
