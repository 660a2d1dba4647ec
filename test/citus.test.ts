/**
 * Citus mode (`distributed: 'citus'`, README "Citus"): the option checks always; with CITUS_URL
 * (a coordinator, docs/citus.md) a phase's business row and its recovery point committing on
 * one shard, `migrate()` again and again on a distributed table, the mode checks against the
 * table, the per-shard sweep skipping a locked row, and tokens drawn on the coordinator. The store
 * contract and the engine suite run on Citus through test/helpers/citus-stores.ts.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { pglite } from './helpers/pglite.js';
import { InvalidOptionError } from '../src/core/errors.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { CITUS_URL, citusNotice } from './helpers/citus-stores.js';
import { tableName } from './helpers/engines.js';
import { claimInput, claimedToken, finishWith, LONG_LEASE_MS, phase } from './contracts/store/shared.js';

citusNotice();

describe('Citus mode options', () => {
  const db = pglite();
  after(() => db.close());
  it('rejects partitioned and groupCommit with distributed, and an unknown distributed value; notify sends from the coordinator', () => {
    const client = db as SqlClient;
    assert.throws(() => new PostgresStore({ client, distributed: 'citus', partitioned: true }), InvalidOptionError);
    assert.throws(() => new PostgresStore({ client, distributed: 'citus', groupCommit: true }), InvalidOptionError);
    assert.equal(typeof new PostgresStore({ client, distributed: 'citus', notify: true }).subscribe, 'function');
    assert.throws(() => new PostgresStore({ client, distributed: 'yugabyte' as never }), InvalidOptionError);
    assert.equal(new PostgresStore({ client, distributed: 'citus', encryption: undefined }).distributed, 'citus');
    assert.equal(new PostgresStore({ client }).distributed, undefined);
  });
  it('refuses to migrate in Citus mode on a database without the citus extension', async () => {
    await assert.rejects(new PostgresStore({ client: db as SqlClient, table: tableName(), distributed: 'citus' }).migrate(), InvalidOptionError);
  });
});

describe('Citus mode on a cluster', { skip: CITUS_URL ? false : 'CITUS_URL is not set' }, () => {
  let pool: pg.Pool;
  const tables: string[] = [];
  before(() => {
    pool = new pg.Pool({ connectionString: CITUS_URL, max: 10 });
  });
  after(async () => {
    for (const t of tables.reverse()) await pool.query(`DROP TABLE IF EXISTS "${t}" CASCADE`).catch(() => undefined);
    await pool.end();
  });
  /** A Citus-mode store on a fresh table, migrated and distributed. */
  async function distributed(options: { notify?: boolean } = {}) {
    const table = tableName('idem_citus');
    tables.push(`${table}_blobs`, table);
    const store = new PostgresStore({ client: pool as SqlClient, table, distributed: 'citus', ...options });
    await store.migrate();
    const result = await store.distribute();
    return { table, store, result };
  }
  /** The shard of `table` holding `value` of its distribution column, and the node it lives on. */
  async function placement(table: string, value: string) {
    const { rows } = await pool.query(
      `SELECT s.shardid::text AS shard, s.nodename || ':' || s.nodeport AS node,
         (SELECT shardminvalue FROM pg_dist_shard WHERE shardid = s.shardid) AS min
       FROM citus_shards s WHERE s.shardid = get_shard_id_for_distribution_column($1::regclass, $2::text)`,
      [table, value],
    );
    return rows[0] as { shard: string; node: string; min: string };
  }

  it('wait mode (protocol.md K17): the coordinator notifies, 16 duplicates get the winner response, the handler once', async () => {
    const { store } = await distributed({ notify: true });
    const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000 });
    let runs = 0;
    let finishedAt = 0;
    const answers = await Promise.all(
      Array.from({ length: 16 }, async () => {
        const begun = await eng.begin({ scope: 'tenant-w', key: 'race', fingerprint: new Uint8Array(32).fill(7) });
        if (begun.kind === 'execute') {
          runs++;
          await new Promise((resolve) => setTimeout(resolve, 300));
          await begun.execution.finish(async () => ({ status: 201, headers: [], body: new TextEncoder().encode('ok') }));
          finishedAt = performance.now();
          return 0;
        }
        assert.equal(begun.kind, 'replay');
        return performance.now();
      }),
    );
    assert.equal(runs, 1);
    // Without the coordinator's notification they would answer at their wait's end (10 s).
    for (const at of answers.filter((a) => a > 0)) assert.ok(at - finishedAt < 2000, `a loser answered ${(at - finishedAt).toFixed(0)} ms after the finish`);
  });

  it('distributes the table and its blob table by scope, co-located, once', async () => {
    const { table, store, result } = await distributed();
    assert.equal(result.table, 'distributed');
    assert.equal(result.blobs, 'distributed');
    const { rows } = await pool.query(
      `SELECT logicalrelid::text AS t, column_to_column_name(logicalrelid, partkey) AS col, colocationid FROM pg_dist_partition
       WHERE logicalrelid IN ($1::regclass, $2::regclass) ORDER BY 1`,
      [table, `${table}_blobs`],
    );
    assert.deepEqual(
      rows.map((r) => r.col),
      ['scope', 'scope'],
    );
    assert.equal(rows[0]!.colocationid, rows[1]!.colocationid);
    assert.equal(rows[0]!.colocationid, result.colocationId);
    assert.match(result.colocateHint, new RegExp(`colocate_with => '${table}'`));
    const again = await store.distribute();
    assert.equal(again.table, 'exists');
    assert.equal(again.blobs, 'exists');
  });

  it('migrates a distributed table any number of times, also from several stores at once, and keeps the sequence owned', async () => {
    const { table, store } = await distributed();
    for (let i = 0; i < 3; i++) assert.equal((await store.migrate()).table, 'exists');
    const others = Array.from({ length: 4 }, () => new PostgresStore({ client: pool as SqlClient, table, distributed: 'citus' }));
    for (const r of await Promise.all(others.map((s) => s.migrate()))) assert.equal(r.table, 'exists');
    const owned = await pool.query(
      `SELECT count(*)::int AS n FROM pg_depend WHERE classid = 'pg_class'::regclass AND objid = $1::regclass AND refobjid = $2::regclass AND deptype = 'a'`,
      [`${table}_lock_version_seq`, table],
    );
    assert.equal(owned.rows[0]!.n, 1);
    // And the store still works after it.
    const token = claimedToken(await store.claim(claimInput('after-migrate')));
    assert.ok(token > 0);
  });

  it('refuses a distributed table opened without Citus mode', async () => {
    const { table } = await distributed();
    await assert.rejects(new PostgresStore({ client: pool as SqlClient, table }).migrate(), InvalidOptionError);
    assert.equal(await new PostgresStore({ client: pool as SqlClient, table }).distribution(), 'citus');
  });

  it('commits a phase and its co-located business row on one shard, without a two-phase commit', async () => {
    const { table, store } = await distributed();
    const orders = `${table}_orders`;
    tables.push(orders);
    await pool.query(`CREATE TABLE "${orders}" (tenant text NOT NULL, id text NOT NULL, amount int NOT NULL, PRIMARY KEY (tenant, id))`);
    await pool.query(`SELECT create_distributed_table($1, 'tenant', colocate_with => $2)`, [orders, table]);
    // Two tenants on different worker nodes: the control case below must cross nodes.
    const nodes = new Map<string, string>();
    for (let i = 0; nodes.size < 2 && i < 200; i++) {
      const p = await placement(table, `tenant-${i}`);
      if (![...nodes.values()].includes(p.node)) nodes.set(`tenant-${i}`, p.node);
    }
    const [tenant, other] = [...nodes.keys()] as [string, string];
    assert.ok(other, 'the cluster needs two worker nodes with shards');

    /** Runs a phase of `tenant`'s key whose effect inserts `rows`, and returns the remote commands Citus sent. */
    const phaseWriting = async (key: string, rows: Array<[string, string]>) => {
      const ref = { scope: tenant, key, token: claimedToken(await store.claim(claimInput(key, { scope: tenant }))) };
      const commands: string[] = [];
      const onNotice = (msg: { message?: string }) => void commands.push(String(msg.message));
      let conn: pg.PoolClient | undefined;
      const result = await store.commit(ref, phase('charge'), async (tx: Queryable) => {
        conn = tx as unknown as pg.PoolClient;
        conn.on('notice', onNotice);
        await tx.query(`SET LOCAL citus.log_remote_commands = on`);
        for (const [t, id] of rows) await tx.query(`INSERT INTO "${orders}" (tenant, id, amount) VALUES ($1, $2, 100)`, [t, id]);
        return 'ok'; // the fenced write and the commit follow on this connection
      });
      conn?.off('notice', onNotice);
      assert.equal(result.kind, 'ok');
      return { ref, commands };
    };

    const { ref, commands } = await phaseWriting('k1', [[tenant, 'o1']]);
    const keyShard = await placement(table, tenant);
    const orderShard = await placement(orders, tenant);
    assert.equal(orderShard.node, keyShard.node, 'the business row and the key row live on one node');
    assert.equal(orderShard.min, keyShard.min, 'on co-located shards (same hash range)');
    assert.ok(
      commands.some((c) => c.includes(`_${orderShard.shard}`)),
      `the insert went to shard ${orderShard.shard}: ${commands.join(' | ')}`,
    );
    assert.ok(
      commands.some((c) => c.includes(`_${keyShard.shard}`)),
      `the fenced write went to shard ${keyShard.shard}: ${commands.join(' | ')}`,
    );
    assert.ok(!commands.some((c) => /PREPARE TRANSACTION/i.test(c)), `one shard, one-phase commit: ${commands.join(' | ')}`);
    const recorded = await pool.query(`SELECT recovery_point FROM "${table}" WHERE scope = $1 AND key = $2`, [tenant, 'k1']);
    assert.equal(recorded.rows[0]!.recovery_point, 'charge');
    assert.equal((await store.commit(ref, finishWith({ status: 201, headers: [], body: new Uint8Array([1]) }))).kind, 'ok');

    // Control: a phase that also writes another tenant's row (another node) needs a two-phase commit.
    const control = await phaseWriting('k2', [
      [tenant, 'o2'],
      [other, 'o3'],
    ]);
    assert.ok(
      control.commands.some((c) => /PREPARE TRANSACTION/i.test(c)),
      `a write on two nodes is a two-phase commit: ${control.commands.join(' | ')}`,
    );
  });

  it('sweeps per shard without waiting on a locked row, and deletes it once free', async () => {
    const { table, store } = await distributed();
    const scopes = Array.from({ length: 12 }, (_, i) => `sweep-${i}`);
    for (const scope of scopes) {
      const token = claimedToken(await store.claim(claimInput('k', { scope, leaseMs: 0 })));
      assert.equal((await store.commit({ scope, key: 'k', token }, finishWith({ status: 200, headers: [], body: new Uint8Array([2]) }))).kind, 'ok');
    }
    await pool.query(`UPDATE "${table}" SET created_at = '2000-01-01T00:00:00Z' WHERE scope LIKE 'sweep-%'`);
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${table}" WHERE scope = $1 AND key = 'k' FOR UPDATE`, [scopes[0]]);
      const report = await store.sweepReport({ retentionMs: 60_000, batchSize: 2 });
      assert.equal(report.deleted, scopes.length - 1, 'every row but the locked one');
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    assert.equal(await store.sweep({ retentionMs: 60_000 }), 1);
    assert.equal(Number((await pool.query(`SELECT count(*) AS n FROM "${table}"`)).rows[0]!.n), 0);
  });

  it("draws takeover and replacement tokens from the coordinator's sequence, as the claim does", async () => {
    const { table, store } = await distributed();
    const token = claimedToken(await store.claim(claimInput('w', { leaseMs: 0 })));
    const taken = await store.takeOver({ scope: 'tenant-1', key: 'w', token }, LONG_LEASE_MS);
    assert.equal(taken.kind, 'taken');
    const newToken = (taken as { token: number }).token;
    // Worker sequences start at 2^48 per node: a token drawn there would be far above the claim's.
    assert.ok(newToken > token && newToken < 2 ** 40, `takeover token ${newToken} from the coordinator's sequence (claim ${token})`);
    await pool.query(`UPDATE "${table}" SET created_at = '2000-01-01T00:00:00Z', locked_until = NULL WHERE scope = 'tenant-1' AND key = 'w'`);
    const replaced = claimedToken(await store.claim(claimInput('w')));
    assert.ok(replaced > newToken && replaced < 2 ** 40, `replacement token ${replaced} from the coordinator's sequence (takeover ${newToken})`);
  });
});
