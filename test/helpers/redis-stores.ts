/**
 * RedisStore entries for the store factory list (test/helpers/stores.ts): on the machine's
 * Redis, on a 3-master Redis Cluster the factory starts itself (and stops after), each also
 * through Valkey GLIDE, and with
 * PostgresPhases on PGlite (atomic phases). The backdoors reach the key's hash with raw
 * commands, as the PostgreSQL factory reaches its table with SQL.
 */
import { pglite } from './pglite.js';
import { PostgresPhases, RedisStore } from '../../src/redis/index.js';
import { hashKey, tokenKey } from '../../src/redis/keys.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import { clusterClients, glideCluster, glideSingle, randomPrefix, singleClients, startCluster, type TestClient, type TestCluster } from './redis.js';
import { tableName } from './engines.js';
import type { StoreFactory, StoreHarness } from './stores.js';
import type { KeyRow } from './http.js';

/**
 * Wraps the store to remember every (scope, key) it was asked about, so `count` and `drop`
 * work on Cluster too (no keyspace scan across masters).
 */
function tracked<Tx>(store: RedisStore<Tx>, seen: Map<string, [string, string]>): IdempotencyStore<Tx> {
  const note = (scope: string, key: string) => void seen.set(JSON.stringify([scope, key]), [scope, key]);
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const a = args[0] as { scope?: unknown; key?: unknown } | string;
        if (typeof a === 'string' && typeof args[1] === 'string') note(a, args[1]);
        else if (a && typeof a === 'object' && typeof a.scope === 'string' && typeof a.key === 'string') note(a.scope, a.key);
        return (value as (...x: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

function redisHarness(t: TestClient, ledger?: { client: SqlClient }): () => Promise<StoreHarness> {
  return async () => {
    const prefix = randomPrefix();
    const seen = new Map<string, [string, string]>();
    const notes: string[] = [];
    let phases: PostgresPhases | undefined;
    let table: string | undefined;
    if (ledger) {
      table = tableName('idem_phases');
      phases = new PostgresPhases({ client: ledger.client, table });
      await phases.migrate();
      await (ledger.client as Queryable).query(`CREATE TABLE "${table}_side" (id serial PRIMARY KEY, note text NOT NULL)`);
    }
    const store = phases ? new RedisStore<Queryable>({ client: t.client, prefix, phases }) : new RedisStore({ client: t.client, prefix });
    const h = (scope: string, key: string) => hashKey(prefix, scope, key);
    const cmd = (scope: string, key: string, args: string[]) => t.raw(h(scope, key), args);
    const serverNowMs = async (scope: string, key: string) => {
      const [s, us] = (await cmd(scope, key, ['TIME'])) as [string, string];
      return Number(s) * 1000 + Math.floor(Number(us) / 1000);
    };
    const harness: StoreHarness<unknown> = {
      store: tracked(store as RedisStore<unknown>, seen),
      effect: (note) => async (tx) => {
        if (phases) await (tx as Queryable).query(`INSERT INTO "${table}_side" (note) VALUES ($1)`, [note]);
        else notes.push(note);
        return { note };
      },
      effects: async () =>
        phases ? (await (ledger!.client as Queryable).query(`SELECT note FROM "${table}_side" ORDER BY id`)).rows.map((r) => String(r.note)) : [...notes],
      async age(scope, key, ms) {
        // Time passes for the ledger row too: its age decides whether a new claim of the key
        // resumes its phases or starts empty (protocol.md K22).
        if (phases)
          await (ledger!.client as Queryable).query(
            `UPDATE "${table}" SET created_at = created_at - $3::int8 * interval '1 millisecond' WHERE scope = $1 AND key = $2`,
            [scope, key, ms],
          );
        if ((await cmd(scope, key, ['EXISTS', h(scope, key)])) === 0) return;
        await cmd(scope, key, ['HINCRBY', h(scope, key), 'ca', String(-ms)]);
        if (Number(await cmd(scope, key, ['HGET', h(scope, key), 'lu'])) > 0) await cmd(scope, key, ['HINCRBY', h(scope, key), 'lu', String(-ms)]);
      },
      async setLease(scope, key, ms) {
        if ((await cmd(scope, key, ['EXISTS', h(scope, key)])) === 0) return;
        await cmd(scope, key, ['HSET', h(scope, key), 'lu', String((await serverNowMs(scope, key)) + ms)]);
      },
      async tokenOf(scope, key) {
        const tok = await cmd(scope, key, ['HGET', h(scope, key), 'tok']);
        return tok === null || tok === undefined ? undefined : Number(tok);
      },
      async snapshot(scope, key) {
        const flat = (await cmd(scope, key, ['HGETALL', h(scope, key)])) as string[] | Record<string, string>;
        if (!Array.isArray(flat)) return { ...flat };
        const out: Record<string, string> = {};
        for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!;
        return out;
      },
      async staleInTx(tx, scope, key) {
        // A takeover racing the commit: the token moves on where the commit is fenced (the
        // ledger, on the commit's own transaction, so it rolls back with it; or the hash).
        if (phases) await (tx as Queryable).query(`UPDATE "${table}" SET token = token + 1 WHERE scope = $1 AND key = $2`, [scope, key]);
        else await cmd(scope, key, ['HINCRBY', h(scope, key), 'tok', '1']);
      },
      async dump() {
        const parts: string[] = [];
        for (const [scope, key] of seen.values()) parts.push(JSON.stringify(await harness.snapshot(scope, key)));
        if (phases) parts.push(JSON.stringify((await (ledger!.client as Queryable).query(`SELECT * FROM "${table}"`)).rows));
        return parts.join('\n');
      },
      async rows() {
        const out: KeyRow[] = [];
        for (const [scope, key] of [...seen.values()].sort((a, b) => (a[0] + '\0' + a[1] < b[0] + '\0' + b[1] ? -1 : 1))) {
          const f = (await harness.snapshot(scope, key)) as Record<string, string>;
          if (!f.st) continue;
          const [s, us] = (await cmd(scope, key, ['TIME'])) as [string, string];
          out.push({
            scope,
            key,
            state: f.st,
            recovery_point: f.rp ?? 'start',
            lock_version: f.tok ?? '',
            fingerprint: f.fp ?? '',
            response_status: f.rs === undefined ? null : Number(f.rs),
            response_body: f.rb === undefined ? null : Buffer.from(f.rb, 'base64').toString('hex'),
            response_headers: f.rh === undefined ? null : JSON.parse(f.rh),
            locked: Number(f.lu ?? 0) > Number(s) * 1000 + Math.floor(Number(us) / 1000),
          });
        }
        return out;
      },
      async count() {
        let n = 0;
        for (const [scope, key] of seen.values()) n += Number(await cmd(scope, key, ['EXISTS', h(scope, key)]));
        return n;
      },
      async drop() {
        for (const [scope, key] of seen.values()) {
          await cmd(scope, key, ['DEL', h(scope, key)]);
          await cmd(scope, key, ['DEL', tokenKey(h(scope, key))]);
        }
        await t.raw(`${prefix}:inflight`, ['DEL', `${prefix}:inflight`]);
        if (phases) {
          await (ledger!.client as Queryable).query(`DROP TABLE IF EXISTS "${table}_side"`);
          await (ledger!.client as Queryable).query(`DROP TABLE IF EXISTS "${table}"`);
        }
      },
    };
    return harness as StoreHarness;
  };
}

/** RedisStore on the machine's Redis (REDIS_URL), through node-redis. Phases are not atomic with their effects. */
export const redisFactory: StoreFactory = {
  name: 'RedisStore on Redis',
  capabilities: { sweep: false, partitioned: false, sql: false, virtualTime: false, atomicEffects: false },
  // The engine and HTTP suites assume a fenced commit rolls its effects back, which a
  // NoTransaction store cannot do (5 engine tests); they run on RedisStore + PostgresPhases.
  contractOnly: true,
  async connect() {
    const t = await singleClients[0]!.open();
    return { fresh: redisHarness(t), close: () => t.close() };
  },
};

/** Starts a 3-master cluster, opens the client `open` makes on it; both closed with the backend. */
async function clusterBackend(open: (cluster: TestCluster) => Promise<TestClient>) {
  const cluster = await startCluster();
  try {
    const t = await open(cluster);
    return {
      fresh: redisHarness(t),
      async close() {
        await t.close();
        await cluster.stop();
      },
    };
  } catch (error) {
    await cluster.stop();
    throw error;
  }
}

/** RedisStore on a 3-master Redis Cluster started on loopback for the suite, through ioredis. */
export const redisClusterFactory: StoreFactory = {
  name: 'RedisStore on Redis Cluster (3 masters)',
  capabilities: { sweep: false, partitioned: false, sql: false, virtualTime: false, atomicEffects: false },
  // The engine and HTTP suites assume a fenced commit rolls its effects back, which a
  // NoTransaction store cannot do (5 engine tests); they run on RedisStore + PostgresPhases.
  contractOnly: true,
  connect: () =>
    clusterBackend((cluster) =>
      clusterClients(cluster)
        .find((c) => c.name === 'ioredis cluster')!
        .open(),
    ),
};

/** RedisStore on the machine's Redis through Valkey GLIDE (`GlideClient`). */
export const redisGlideFactory: StoreFactory = {
  ...redisFactory,
  name: 'RedisStore on Redis (Valkey GLIDE)',
  async connect() {
    const t = await glideSingle.open();
    return { fresh: redisHarness(t), close: () => t.close() };
  },
};

/** RedisStore on a 3-master Redis Cluster started for the suite, through Valkey GLIDE (`GlideClusterClient`). */
export const redisGlideClusterFactory: StoreFactory = {
  ...redisClusterFactory,
  name: 'RedisStore on Redis Cluster (3 masters, Valkey GLIDE)',
  connect: () => clusterBackend((cluster) => glideCluster(cluster).open()),
};

/** RedisStore with PostgresPhases on PGlite: claims in Redis, atomic phases in PostgreSQL. */
export const redisPostgresPhasesFactory: StoreFactory = {
  name: 'RedisStore + PostgresPhases (PGlite)',
  capabilities: { sweep: false, partitioned: false, sql: false, virtualTime: false, forget: false },
  contractOnly: false,
  async connect() {
    const t = await singleClients[0]!.open();
    const db = pglite();
    await db.waitReady;
    return {
      fresh: redisHarness(t, { client: db as unknown as SqlClient }),
      async close() {
        await t.close();
        await db.close();
      },
    };
  },
};
