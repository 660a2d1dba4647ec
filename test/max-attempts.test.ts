/**
 * A request that fails the same way on every attempt stops (issue 11, item 3), on every
 * adapter and every engine: failed attempts are counted in the key's row; at `maxAttempts` the
 * key is finished with a stored 500 problem `request-failed-permanently`, replayed from then
 * on, and the completer no longer picks it up. Infrastructure failures do not count. The
 * reproduction is the field one: a body with a NUL character that the database refuses.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Completer, HttpIdempotency } from '../src/http/index.js';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { harnesses, type AdapterHarness, type Route } from './helpers/adapter-harness.js';
import { engines, freshStore, tableName, useEngine } from './helpers/engines.js';
import { assertProblem, requestInit } from './helpers/http.js';

async function failedAttempts(db: SqlClient, table: string, key: string): Promise<{ state: string; failed_attempts: number } | undefined> {
  const { rows } = await db.query(`SELECT state, failed_attempts FROM "${table}" WHERE key = $1`, [key]);
  return rows[0] as { state: string; failed_attempts: number } | undefined;
}

function attempts(harness: AdapterHarness, db: () => SqlClient, cleanup: (fn: () => Promise<void>) => void): void {
  async function setup(route: Route, options: Partial<IdempotencyOptions<Queryable>> = {}) {
    const { store, table, drop } = await freshStore(db());
    cleanup(drop);
    const notes = tableName('idem_notes');
    await db().query(`CREATE TABLE "${notes}" (customer text NOT NULL)`);
    cleanup(async () => void (await db().query(`DROP TABLE IF EXISTS "${notes}"`)));
    const counter = { H: 0 };
    const app = harness.build(
      { store, onHandlerError: () => undefined, ...options },
      (req, ctx) => {
        counter.H++;
        return route(req, ctx);
      },
      cleanup,
    );
    return { app, counter, table, notes, store };
  }

  it('a NUL in the body, refused by the database on every attempt: 500 retry x4, then request-failed-permanently, replayed from then on', async () => {
    let notes = '';
    const { app, counter, table } = await setup(async (req, ctx) => {
      const body = await req.json<{ customer: string }>();
      await ctx!.phase('noted', async (tx) => tx.query(`INSERT INTO "${notes}" (customer) VALUES ($1)`, [body.customer]));
      return { status: 201, body: 'ok' };
    }).then((t) => {
      notes = t.notes;
      return t;
    });
    const send = () => app.send('/v1/charges', requestInit({ key: 'nul-1', json: { customer: 'cus_\u0000evil' } }));
    for (let attempt = 1; attempt <= 4; attempt++) {
      await assertProblem(await send(), 500, 'request-failed-retry');
      assert.deepEqual({ ...(await failedAttempts(db(), table, 'nul-1')) }, { state: 'started', failed_attempts: attempt });
    }
    const last = await send();
    assert.equal(last.headers.get('idempotent-replayed'), null);
    const problem = await assertProblem(last, 500, 'request-failed-permanently');
    assert.match(String(problem.detail), /5 attempts/);
    // No step completed: nothing to undo, so a new key is the advice.
    assert.match(String(problem.detail), /send it with a new key/);
    assert.deepEqual({ ...(await failedAttempts(db(), table, 'nul-1')) }, { state: 'done', failed_attempts: 5 });
    for (let i = 0; i < 2; i++) {
      const replay = await send();
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await assertProblem(replay, 500, 'request-failed-permanently');
    }
    assert.equal(counter.H, 5, 'the handler ran five times, never again');
  });

  it('a failure after a committed step, on every attempt: the permanent problem says the step completed and warns that a new key runs it again', async () => {
    let notesTable = '';
    const { app, counter } = await setup(async (_req, ctx) => {
      // A charge row, committed once (a retry resumes past it), then a failure every time.
      await ctx!.phase('charged', async (tx) => tx.query(`INSERT INTO "${notesTable}" (customer) VALUES ('cus_1')`));
      throw new Error('receipt renderer crashed');
    }).then((t) => {
      notesTable = t.notes;
      return t;
    });
    const send = () => app.send('/v1/charges', requestInit({ key: 'after-step-1', json: { customer: 'cus_1' } }));
    for (let attempt = 1; attempt <= 4; attempt++) await assertProblem(await send(), 500, 'request-failed-retry');
    const problem = await assertProblem(await send(), 500, 'request-failed-permanently');
    assert.match(String(problem.detail), /after some of its steps had completed \(recovery point 'charged'\)/);
    assert.match(String(problem.detail), /check them before sending the request again with a new key/);
    assert.doesNotMatch(String(problem.detail), /Fix the request and send it with a new key/);
    assert.equal(counter.H, 5);
    const { rows } = await db().query(`SELECT count(*)::int AS n FROM "${notesTable}"`);
    assert.equal(rows[0]!.n, 1, 'the step ran once');
  });

  it('maxAttempts 1, two steps committed by the attempt that fails: the permanent problem names the later one', async () => {
    let notesTable = '';
    const { app } = await setup(
      async (_req, ctx) => {
        await ctx!.phase('charged', async (tx) => tx.query(`INSERT INTO "${notesTable}" (customer) VALUES ('cus_2')`));
        await ctx!.phase('receipt', async () => 'r-1');
        throw new Error('mailer crashed');
      },
      { maxAttempts: 1 },
    ).then((t) => {
      notesTable = t.notes;
      return t;
    });
    const problem = await assertProblem(
      await app.send('/v1/charges', requestInit({ key: 'after-step-2', json: { customer: 'cus_2' } })),
      500,
      'request-failed-permanently',
    );
    assert.match(String(problem.detail), /failed on 1 attempt after some of its steps had completed \(recovery point 'receipt'\)/);
  });

  it('maxAttempts is an option; infrastructure failures (dropped connection, SQLSTATE 08, mysql2 connection loss and deadlock, errors marked transient) do not count', async () => {
    let transient = true;
    const kinds = [
      new Error('Connection terminated unexpectedly'),
      Object.assign(new Error('server closed the connection'), { code: '08006' }),
      Object.assign(new Error('payment provider down'), { transient: true }),
      // mysql2 on a cut connection, and on a deadlock.
      Object.assign(new Error('Connection lost: The server closed the connection.'), { code: 'PROTOCOL_CONNECTION_LOST', fatal: true }),
      Object.assign(new Error('Deadlock found when trying to get lock'), { code: 'ER_LOCK_DEADLOCK', errno: 1213, sqlState: '40001' }),
    ];
    const { app, counter, table } = await setup(
      () => {
        if (transient) throw kinds[counter.H % kinds.length]!;
        throw new Error('a bug in the handler');
      },
      { maxAttempts: 2 },
    );
    const send = () => app.send('/v1/charges', requestInit({ key: 'flaky', json: {} }));
    for (let i = 0; i < kinds.length; i++) await assertProblem(await send(), 500, 'request-failed-retry');
    assert.equal((await failedAttempts(db(), table, 'flaky'))!.failed_attempts, 0, 'transient failures are not counted');
    transient = false;
    await assertProblem(await send(), 500, 'request-failed-retry');
    await assertProblem(await send(), 500, 'request-failed-permanently');
    assert.equal(counter.H, kinds.length + 2);
  });
}

for (const engine of engines) {
  describe(`maxAttempts over ${engine.name}`, () => {
    const db = useEngine(engine);
    for (const harness of harnesses) describe(harness.name, () => attempts(harness, db.client, db.cleanup));

    it('the completer fails a stored request up to maxAttempts, then the key is finished and no longer listed', async () => {
      const { store, table, drop } = await freshStore(db.client());
      db.cleanup(drop);
      const http = new HttpIdempotency<Queryable>({ store, storeRequests: true, maxAttempts: 3, leaseMs: 1000, onHandlerError: () => undefined });
      let runs = 0;
      const completer = new Completer<Queryable>({
        http,
        run: async () => {
          runs++;
          throw new Error('fails every time');
        },
      });
      // The client's own attempt fails once and never retries.
      const first = await http.handle(
        new Request('http://api.test/v1/charges', {
          method: 'POST',
          headers: { 'idempotency-key': 'abandoned', 'content-type': 'application/json' },
          body: '{}',
        }),
        () => {
          throw new Error('fails every time');
        },
      );
      await assertProblem(first, 500, 'request-failed-retry');
      const reports = [];
      for (let pass = 0; pass < 4; pass++) reports.push(await completer.runOnce());
      assert.deepEqual(
        reports.map((r) => r.found),
        [1, 1, 0, 0],
        'listed until the key is finished',
      );
      assert.equal(runs, 2, 'the completer ran it twice (attempts 2 and 3), then stopped');
      assert.deepEqual({ ...(await failedAttempts(db.client(), table, 'abandoned')) }, { state: 'done', failed_attempts: 3 });
      const replay = await http.handle(
        new Request('http://api.test/v1/charges', {
          method: 'POST',
          headers: { 'idempotency-key': 'abandoned', 'content-type': 'application/json' },
          body: '{}',
        }),
        () => new Response('never'),
      );
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      await assertProblem(replay, 500, 'request-failed-permanently');
    });

    it('migrate() adds failed_attempts to a table made by an earlier version, only when missing', async () => {
      const { store, table, drop } = await freshStore(db.client());
      db.cleanup(drop);
      await db.client().query(`ALTER TABLE "${table}" DROP COLUMN failed_attempts`);
      await db.client().query(`INSERT INTO "${table}" (scope, key, fingerprint, state) VALUES ('s', 'old', decode(repeat('00', 32), 'hex'), 'started')`);
      await store.migrate();
      assert.deepEqual({ ...(await failedAttempts(db.client(), table, 'old')) }, { state: 'started', failed_attempts: 0 });
      await new PostgresStore({ client: db.client(), table }).migrate(); // a second run changes nothing
      assert.deepEqual({ ...(await failedAttempts(db.client(), table, 'old')) }, { state: 'started', failed_attempts: 0 });
    });
  });
}
