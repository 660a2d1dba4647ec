/**
 * Operators (protocol.md K40-K42): `releaseKey` / `forgetKey` (idem/operator) against real HTTP
 * traffic through the HTTP core on PGlite, their OpenTelemetry span, and the `idem release` /
 * `idem forget` commands run as child processes on PostgreSQL (DATABASE_URL).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import * as api from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { HttpIdempotency } from '../src/http/index.js';
import { forgetKey, releaseKey } from '../src/operator/index.js';
import { telemetryFrom } from '../src/otel/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import { tableName } from './helpers/engines.js';
import { needs } from './helpers/services.js';
import { idem } from './helpers/cli.js';

const SCOPE = 'tenant-1';
const RETENTION_MS = 86_400_000;

function post(key: string, body = '{"amount":100}'): Request {
  return new Request('http://api.test/v1/charges', { method: 'POST', headers: { 'idempotency-key': key, 'content-type': 'application/json' }, body });
}

describe('operators on the HTTP core (PGlite)', () => {
  let db: PGlite;
  let store: PostgresStore;
  let http: HttpIdempotency<Queryable>;

  before(async () => {
    db = pglite();
    store = new PostgresStore({ client: db, table: 'op_keys' });
    await store.migrate();
    http = new HttpIdempotency<Queryable>({ store, scope: () => SCOPE, leaseMs: 60_000 });
  });
  after(() => db.close());

  test('a hung worker holds its key: a retry gets 409, release is refused without force; forced, the next request runs once, retries replay, and the hung worker is fenced', async () => {
    let runs = 0;
    let charged = 0;
    let committed!: () => void;
    const phaseCommitted = new Promise<void>((resolve) => (committed = resolve));
    let unblock!: () => void;
    const hang = new Promise<void>((resolve) => (unblock = resolve));
    const handler = async (_req: Request, ctx: Parameters<Parameters<typeof http.handle>[1]>[1]) => {
      runs++;
      await ctx!.phase('charged', async () => ++charged);
      if (runs === 1) {
        committed();
        await hang; // the first worker hangs after its phase, holding a valid lease
      }
      return Response.json({ charged }, { status: 201 });
    };
    const first = http.handle(post('hung'), handler);
    await phaseCommitted;

    assert.equal((await http.handle(post('hung'), handler)).status, 409, 'the lease is valid: in progress');
    const before = await store.get(SCOPE, 'hung', RETENTION_MS);
    const refused = await releaseKey(store, SCOPE, 'hung', { by: 'alice' });
    assert.equal(refused.done, false);
    assert.equal(refused.done === false && refused.refusal, 'live-lease');
    assert.match(refused.message, /a worker holds the lease for \d+ s more .*not released/);
    const unchanged = await store.get(SCOPE, 'hung', RETENTION_MS);
    assert.equal(unchanged?.token, before?.token, 'a live lease is not broken without force');
    assert.equal(unchanged?.leaseExpired, false);

    const released = await releaseKey(store, SCOPE, 'hung', { by: 'alice', reason: 'INC-42', force: true });
    assert.equal(released.done, true, released.message);
    assert.match(released.message, /^released: .* resumes after charged; the worker that held it .* is fenced at its next write$/);
    const record = await store.get(SCOPE, 'hung', RETENTION_MS);
    assert.deepEqual(
      { ...JSON.parse(record!.operatorNote!), at: 'x', leaseRemainingMs: 0 },
      {
        action: 'release',
        at: 'x',
        token: before!.token,
        force: true,
        leaseRemainingMs: 0,
        by: 'alice',
        reason: 'INC-42',
      },
    );

    const next = await http.handle(post('hung'), handler);
    assert.equal(next.status, 201);
    assert.deepEqual(await next.json(), { charged: 1 }, 'resumed after the committed phase: charged once');
    assert.equal(runs, 2, 'the next request ran the handler once');
    const replay = await http.handle(post('hung'), handler);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal(runs, 2, 'later retries replay');

    unblock();
    const late = await first;
    assert.equal(late.status, 409, 'the hung worker is fenced when it finally answers');
    assert.match(await late.text(), /idempotency-lease-lost/);
    assert.equal(charged, 1);
  });

  test('forget: refused on a started key; a finished key runs again once on its next request, and replays after', async () => {
    let runs = 0;
    const handler = async () => {
      runs++;
      return runs === 1 ? Response.json({ error: 'card declined' }, { status: 402 }) : Response.json({ ok: true }, { status: 201 });
    };
    assert.equal((await http.handle(post('declined'), handler)).status, 402);
    assert.equal((await http.handle(post('declined'), handler)).status, 402, 'the stored outcome replays');
    assert.equal(runs, 1);

    const started = await store.claim({ scope: SCOPE, key: 'busy', fingerprint: new Uint8Array(32), leaseMs: 60_000, retentionMs: RETENTION_MS });
    assert.equal(started.kind, 'claimed');
    const refused = await forgetKey(store, SCOPE, 'busy');
    assert.equal(refused.done === false && refused.refusal, 'started');
    assert.match(refused.message, /the key is started \(recovery point start\), not finished/);
    assert.equal((await store.get(SCOPE, 'busy', RETENTION_MS))?.operatorNote, undefined, 'nothing written');

    const forgotten = await forgetKey(store, SCOPE, 'declined', { by: 'bob' });
    assert.equal(forgotten.done, true, forgotten.message);
    assert.match(forgotten.message, /^forgotten: the stored response \(status 402\) is dropped/);
    assert.equal(JSON.parse((await store.get(SCOPE, 'declined', RETENTION_MS))!.operatorNote!).status, 402);

    const [a, b] = await Promise.all([http.handle(post('declined'), handler), http.handle(post('declined'), handler)]);
    assert.ok(a.status === 201 || b.status === 201, 'one of them ran');
    for (const res of [a, b]) assert.ok(res.status === 201 || res.status === 409, `201, a replay of it, or 409: ${res.status}`);
    assert.equal(runs, 2, 'the next request ran it once, a concurrent duplicate did not');
    const replay = await http.handle(post('declined'), handler);
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    assert.equal((await http.handle(post('declined', '{"amount":999}'), handler)).status, 422, 'another body under the key is still a mismatch');
    assert.equal(runs, 2);
  });

  test('every action, done or refused, is an OpenTelemetry span with an event', async () => {
    const spans = new InMemorySpanExporter();
    const telemetry = telemetryFrom(api, { tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }) });
    const claim = await store.claim({ scope: SCOPE, key: 'traced', fingerprint: new Uint8Array(32), leaseMs: 0, retentionMs: RETENTION_MS });
    assert.equal(claim.kind, 'claimed');
    assert.equal((await forgetKey(store, SCOPE, 'traced', { telemetry })).done, false);
    const done = await releaseKey(store, SCOPE, 'traced', { telemetry, by: 'carol' });
    assert.equal(done.done, true);
    const [refusedSpan, releasedSpan] = spans.getFinishedSpans();
    assert.equal(refusedSpan?.name, 'idem.operator forget');
    assert.equal(refusedSpan?.attributes['idem.operator.outcome'], 'refused:started');
    assert.equal(releasedSpan?.name, 'idem.operator release');
    assert.equal(releasedSpan?.events[0]?.name, 'idem.operator.release');
    assert.deepEqual(
      {
        outcome: releasedSpan?.attributes['idem.operator.outcome'],
        key: releasedSpan?.attributes['idem.key'],
        by: releasedSpan?.attributes['idem.operator.by'],
        token: releasedSpan?.attributes['idem.token'],
        newToken: releasedSpan?.attributes['idem.operator.new_token'],
      },
      { outcome: 'done', key: 'traced', by: 'carol', token: (claim as { token: number }).token, newToken: done.done ? done.newToken : -1 },
    );
  });
});

describe('idem release / idem forget (PostgreSQL)', { skip: needs('DATABASE_URL'), timeout: 300_000 }, () => {
  const url = process.env.DATABASE_URL!;
  const table = tableName('idem_op');
  let pool: pg.Pool;
  let store: PostgresStore;
  const args = (...rest: string[]) => [...rest, '--database-url', url, '--table', table];

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    store = new PostgresStore({ client: pool, table });
    await store.migrate();
  });
  after(async () => {
    await pool.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
    await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
    await pool.end();
  });

  test('prints what it did or why it refused (exit 1, nothing changed); inspect shows the note', async () => {
    const claim = await store.claim({ scope: SCOPE, key: 'k1', fingerprint: new Uint8Array(32), leaseMs: 60_000, retentionMs: RETENTION_MS });
    const token = (claim as { token: number }).token;
    const live = await idem(args('release', SCOPE, 'k1', '--by', 'ops'));
    assert.equal(live.code, 1);
    assert.match(live.stderr, /^error: not released: a worker holds the lease for \d+ s more \(token \d+\): not released; wait for it to end, or force it/);
    const forgetStarted = await idem(args('forget', SCOPE, 'k1'));
    assert.equal(forgetStarted.code, 1);
    assert.match(forgetStarted.stderr, /^error: not forgotten: the key is started/);
    assert.equal((await store.get(SCOPE, 'k1', RETENTION_MS))?.token, token, 'unchanged');

    const forced = await idem(args('release', SCOPE, 'k1', '--force', '--by', 'ops', '--reason', 'INC-7', '--token', String(token)));
    assert.equal(forced.code, 0, forced.stderr);
    assert.match(forced.stdout, /^tenant-1 k1: released: the lease ended now; token \d+ -> \d+; .* Recorded on the row: \{"action":"release"/);
    const inspected = await idem(args('inspect', SCOPE, 'k1'));
    assert.match(inspected.stdout, /operator:\s+\{"action":"release",.*"force":true.*"by":"ops","reason":"INC-7"\}/);

    const json = await idem(args('forget', SCOPE, 'absent', '--json'));
    assert.equal(json.code, 1);
    assert.equal(JSON.parse(json.stdout).refusal, 'absent');
  });
});
