/**
 * The examples the database-client, store and runtime guides include (docs/guides/pg.md …):
 * each one, run as a guide shows it, answers the same request twice with a byte-identical
 * replay, a changed body under the same key with 422, and concurrent duplicates with one row.
 * PGlite, Kysely on PGlite, the memory store and the fetch worker always; pg and postgres.js
 * with DATABASE_URL (random table names, dropped after).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { pglite } from './helpers/pglite.js';
import { PostgresStore } from 'idem/postgres';
import { crashAndTakeOver } from '../examples/memory/charges.js';
import { invoiceJob, worker } from '../examples/fetch/worker.js';
import { createCharges as kyselyCharges } from '../examples/kysely/charges.js';
import { createCharges as pgCharges, openPool } from '../examples/pg/charges.js';
import { createCharges as pgliteCharges } from '../examples/pglite/charges.js';
import { createCharges as postgresjsCharges, openSql } from '../examples/postgresjs/charges.js';
import { needs } from './helpers/services.js';

type Handle = (request: Request) => Promise<Response>;

const charge = (key: string, amount: number) =>
  new Request('http://app.test/v1/charges', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json', authorization: 'Bearer sk_test' },
    body: JSON.stringify({ amount }),
  });

/** Replay, 422 on a changed body, one effect under concurrent duplicates; `rows()` counts charges. */
async function exercise(handle: Handle, rows: () => Promise<number>) {
  const first = await handle(charge('k-1', 1999));
  assert.equal(first.status, 201);
  const body = await first.text();
  const again = await handle(charge('k-1', 1999));
  assert.equal(again.status, 201);
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assert.equal(await again.text(), body);

  const changed = await handle(charge('k-1', 2999));
  assert.equal(changed.status, 422);
  assert.match(((await changed.json()) as { type: string }).type, /idempotency-key-reused$/);

  const answers = await Promise.all(Array.from({ length: 8 }, () => handle(charge('k-2', 500))));
  const statuses = answers.map((a) => a.status);
  assert.ok(
    statuses.every((s) => s === 201 || s === 409),
    `statuses ${statuses}`,
  );
  assert.equal(await rows(), 2, 'one charge row per key');
}

describe('guide examples on PGlite and memory', { concurrency: true }, () => {
  test('PGlite (examples/pglite/charges.ts)', async () => {
    const { handle, db } = await pgliteCharges();
    await exercise(handle, async () => Number((await db.query<{ n: number }>('SELECT count(*)::int AS n FROM charges')).rows[0]!.n));
    await db.close();
  });

  test('Kysely on PGlite (examples/kysely/charges.ts)', async () => {
    const { handle, db } = await kyselyCharges();
    await exercise(handle, async () => (await db.selectFrom('charges').select(db.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n);
    await db.destroy();
  });

  test('the memory store: a crashed attempt is taken over once its lease ran out, its phase not run again (examples/memory/charges.ts)', async () => {
    const { duplicate, charge: recorded } = await crashAndTakeOver();
    assert.equal(duplicate, 'in-progress');
    assert.deepEqual(recorded, { id: 'ch_1' });
  });

  test('a fetch worker and a job on the engine alone (examples/fetch/worker.ts)', async () => {
    const db = pglite();
    const store = new PostgresStore({ client: db });
    await store.migrate();
    const { fetch } = worker(store);
    const first = await fetch(charge('w-1', 1));
    const again = await fetch(charge('w-1', 1));
    assert.equal(first.status, 201);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal((await fetch(charge('w-1', 2))).status, 422);

    let sent = 0;
    const message = { id: 'msg-1', body: new TextEncoder().encode('{"invoice":1}') };
    assert.equal(await invoiceJob(store, message, async () => void sent++), 'execute');
    assert.equal(await invoiceJob(store, message, async () => void sent++), 'replay');
    assert.equal(await invoiceJob(store, { ...message, body: new TextEncoder().encode('{"invoice":2}') }, async () => void sent++), 'mismatch');
    assert.equal(sent, 1);
    await db.close();
  });
});

describe('guide examples on PostgreSQL', { skip: needs('DATABASE_URL') }, () => {
  const suffix = randomUUID().slice(0, 8);

  test('pg (examples/pg/charges.ts)', async () => {
    const pool = openPool();
    const [table, charges] = [`guide_pg_keys_${suffix}`, `guide_pg_charges_${suffix}`];
    try {
      const handle = await pgCharges(pool, { table, charges });
      await exercise(handle, async () => Number((await pool.query(`SELECT count(*)::int AS n FROM "${charges}"`)).rows[0].n));
    } finally {
      await pool.query(`DROP TABLE IF EXISTS "${charges}", "${table}_blobs", "${table}" CASCADE`);
      await pool.end();
    }
  });

  test('postgres.js (examples/postgresjs/charges.ts)', async () => {
    const sql = openSql();
    const [table, charges] = [`guide_pgjs_keys_${suffix}`, `guide_pgjs_charges_${suffix}`];
    try {
      const handle = await postgresjsCharges(sql, { table, charges });
      await exercise(handle, async () => Number((await sql`SELECT count(*)::int AS n FROM ${sql(charges)}`)[0]!.n));
    } finally {
      await sql.unsafe(`DROP TABLE IF EXISTS "${charges}", "${table}_blobs", "${table}" CASCADE`);
      await sql.end();
    }
  });
});
