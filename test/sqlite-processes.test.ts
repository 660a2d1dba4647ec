/**
 * SqliteStore across real processes on one file (protocol.md K51): two Hono apps
 * (test/helpers/sqlite-process.ts) on the same SQLite file in WAL mode. 32 concurrent duplicates
 * spread over both give one run and one charge; a mismatch is 422; an app SIGKILLed while it holds
 * a claim is taken over by the other once the lease runs out, and the killed writer's token, held
 * by a live store in this process, is fenced out of every write and its effects rolled back.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { SqliteStore, type SqliteDatabaseLike } from '../src/sqlite/index.js';
import { type Child, spawnTs, stopChild } from './helpers/process.js';
import { scratchFile } from './helpers/sqlite-stores.js';

const NODE_SQLITE: string = 'node:sqlite';
const { DatabaseSync } = (await import(NODE_SQLITE)) as { DatabaseSync: new (file: string) => SqliteDatabaseLike & { close(): void } };

const scratch = scratchFile();
const apps: Child[] = [];
const bases: string[] = [];

async function startApp(): Promise<string> {
  const app = spawnTs('test/helpers/sqlite-process.ts', { IDEM_SQLITE_FILE: scratch.file });
  apps.push(app);
  const [, port] = await app.waitFor(/listening (\d+)/);
  return `http://127.0.0.1:${port}`;
}

const post = (base: string, key: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${base}/v1/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
    body: JSON.stringify(body),
  });

/** `run <key>` lines of every app so far: how often the handler started for `key`. */
const runsOf = (key: string) =>
  apps.reduce(
    (n, app) =>
      n +
      app
        .output()
        .split('\n')
        .filter((line) => line.startsWith(`run ${key} `)).length,
    0,
  );

/** Rows of the file, read on a connection of this process. */
function query(sql: string, ...params: unknown[]): Array<Record<string, unknown>> {
  const db = new DatabaseSync(scratch.file);
  try {
    db.exec('PRAGMA busy_timeout = 5000');
    return (db.prepare(sql).all(...params) as Array<Record<string, unknown>>).map((row) => ({ ...row }));
  } finally {
    db.close();
  }
}

describe('SqliteStore: two processes on one file', () => {
  before(async () => {
    // One after the other: the first migrates, the second finds the tables.
    bases.push(await startApp());
    bases.push(await startApp());
  });
  after(async () => {
    for (const app of apps) await stopChild(app);
    scratch.remove();
  });

  it('runs 32 concurrent duplicates spread over both processes once: one charge, every answer the same', async () => {
    const key = 'dup-32';
    const responses = await Promise.all(Array.from({ length: 32 }, (_, i) => post(bases[i % 2]!, key, { amount: 700 })));
    const bodies = await Promise.all(responses.map(async (r) => ({ status: r.status, body: await r.text() })));
    // A duplicate waits up to 3 s for the first (wait mode by polling); on a loaded machine one
    // may still get the 409 in-progress answer, never a second run.
    for (const { status } of bodies) assert.ok(status === 201 || status === 409, JSON.stringify(bodies));
    const charged = bodies.filter((b) => b.status === 201);
    assert.equal(new Set(charged.map((b) => b.body)).size, 1, 'the replays carry the first response, byte for byte');
    assert.equal(runsOf(key), 1);
    assert.deepEqual(query('SELECT COUNT(*) AS n FROM charges WHERE amount = 700'), [{ n: 1 }]);
    assert.equal(responses.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, charged.length - 1);
  });

  it('answers 422 to the same key with another body, in either process', async () => {
    const first = await post(bases[0]!, 'mismatch', { amount: 5 });
    assert.equal(first.status, 201);
    const other = await post(bases[1]!, 'mismatch', { amount: 6 });
    assert.equal(other.status, 422);
    assert.equal(runsOf('mismatch'), 1);
  });

  it('takes over from a process SIGKILLed holding a claim once its lease runs out, and fences the killed writer out', async () => {
    const key = 'killed-holder';
    const victim = apps[0]!;
    const pending = post(bases[0]!, key, { amount: 900 }, { 'x-hang': '1' }).catch(() => undefined);
    await victim.waitFor(new RegExp(`holding ${key}`));
    const [held] = query('SELECT scope, lock_version FROM idempotency_keys WHERE key = ?', key) as Array<{ scope: string; lock_version: number }>;
    assert.ok(held, 'the claim is in the file before the kill');
    await victim.kill('SIGKILL');
    await pending;

    // The retry goes to the other process: it waits while the dead holder's lease lasts (no
    // heartbeat renews it now), then takes the key over and runs the charge.
    let answer = await post(bases[1]!, key, { amount: 900 });
    for (let attempt = 0; attempt < 100 && answer.status === 409; attempt++) answer = await post(bases[1]!, key, { amount: 900 });
    assert.equal(answer.status, 201, await answer.clone().text());
    assert.equal(runsOf(key), 2, 'the killed run and the takeover');
    const [now] = query('SELECT lock_version, state FROM idempotency_keys WHERE key = ?', key) as Array<{ lock_version: number; state: string }>;
    assert.ok(now!.lock_version > held.lock_version, `the takeover's token ${now!.lock_version} is above the killed holder's ${held.lock_version}`);
    assert.equal(now!.state, 'done');

    // The killed writer, late: a live store in this process with its token. Every write is
    // fenced, and the effects of its commit roll back with it.
    const db = new DatabaseSync(scratch.file);
    try {
      const late = new SqliteStore({ client: db });
      const ref = { scope: held.scope, key, token: held.lock_version };
      assert.deepEqual(await late.extendLease(ref, 60_000), { kind: 'fenced' });
      const commit = await late.commit(
        ref,
        () => ({ kind: 'finish', response: { status: 201, headers: [], body: new TextEncoder().encode('late') } }),
        async (tx) => void tx.prepare('INSERT INTO charges (amount, pid) VALUES (?, ?)').all(900, 0),
      );
      assert.deepEqual(commit, { kind: 'fenced' });
      assert.deepEqual(await late.release(ref), { kind: 'fenced' });
    } finally {
      db.close();
    }
    assert.deepEqual(query('SELECT COUNT(*) AS n FROM charges WHERE amount = 900'), [{ n: 1 }], 'one charge: the late commit rolled back');
    const replay = await post(bases[1]!, key, { amount: 900 });
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(await replay.text(), await answer.text());
  });
});
