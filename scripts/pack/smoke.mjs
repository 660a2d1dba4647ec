// Run by scripts/check-pack.sh inside a scratch project that installed the packed tarball:
// imports every subpath of idem's package.json `exports` as a user would, checks the root
// entry stays small, and serves one request twice through idem on PGlite (claim, then replay),
// and once more through the Next.js route wrapper on the in-memory store.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const require = createRequire(import.meta.url);
const pkg = JSON.parse(readFileSync(require.resolve('idem/package.json'), 'utf8'));
const modules = {};
for (const subpath of Object.keys(pkg.exports)) {
  if (subpath === './package.json') continue;
  // The Durable Object class extends workerd's `cloudflare:workers`: it loads on Workers only
  // (scripts/runtimes.sh bundles and runs it in Miniflare).
  if (subpath === './cloudflare/object') continue;
  const specifier = subpath === '.' ? 'idem' : `idem/${subpath.slice(2)}`;
  modules[specifier] = await import(specifier);
  const names = Object.keys(modules[specifier]);
  assert.ok(names.length > 0, `${specifier} exports nothing`);
  console.log(`${specifier}: ${names.length} runtime exports`);
}

// The root is what applications call; building blocks live in idem/core and idem/http.
const root = modules.idem;
for (const name of [
  'IdempotencyEngine',
  'HttpIdempotency',
  'Completer',
  'fingerprint',
  'deriveKey',
  'IdempotencyError',
  'KeyState',
  'problemResponse',
  'ReplayCache',
]) {
  assert.ok(name in root, `idem exports ${name}`);
}
for (const name of [
  'decide',
  'captureResponse',
  'replayResponse',
  'idemProblem',
  'mediaType',
  'parseIdempotencyKey',
  'sameFingerprint',
  'MAX_KEY_LENGTH',
  'Execution',
  'IdempotencyContext',
]) {
  assert.ok(!(name in root), `idem does not export ${name} at run time`);
}
assert.ok(Object.keys(root).length <= 30, `the root entry stays small (${Object.keys(root).length} names)`);
assert.equal(typeof modules['idem/core'].decide, 'function');
assert.equal(typeof modules['idem/http'].captureResponse, 'function');
assert.equal(typeof modules['idem/gateway'].createGateway, 'function');

// idem/kysely on Kysely's PGlite dialect: a phase gets Kysely's Transaction, its insert commits with the phase.
{
  const { Kysely, PGliteDialect, sql } = await import('kysely');
  const { PGlite } = await import('@electric-sql/pglite');
  const kdb = new Kysely({ dialect: new PGliteDialect({ pglite: await PGlite.create() }) });
  try {
    const store = new modules['idem/postgres'].PostgresStore({ client: modules['idem/kysely'].kysely(kdb) });
    await store.migrate();
    await sql`CREATE TABLE charges (amount int)`.execute(kdb);
    const claimed = await store.claim({ scope: 's', key: 'k', fingerprint: new Uint8Array(32), leaseMs: 60_000, retentionMs: 60_000 });
    const ref = { scope: 's', key: 'k', token: claimed.token };
    const done = await store.commit(
      ref,
      () => ({ kind: 'phase', phase: 'charged', result: null, leaseMs: 60_000 }),
      async (tx) => {
        await tx.insertInto('charges').values({ amount: 1 }).execute();
        return tx.isTransaction;
      },
    );
    assert.deepEqual(done, { kind: 'ok', value: true });
    assert.equal((await store.get('s', 'k', 60_000)).recoveryPoint, 'charged');
    console.log('idem/kysely: a phase on Kysely (PGlite) committed');
  } finally {
    await kdb.destroy();
  }
}
assert.equal(typeof modules['idem/prisma'].prisma, 'function');

// One request twice through the packed library on embedded PostgreSQL.
const { PGlite } = await import('@electric-sql/pglite');
const db = await PGlite.create();
try {
  const store = new modules['idem/postgres'].PostgresStore({ client: db });
  await store.migrate();
  // idem/otel loads @opentelemetry/api lazily; with no SDK registered its spans are no-ops.
  const telemetry = await modules['idem/otel'].openTelemetry();
  const http = new root.HttpIdempotency({ store, telemetry });
  let runs = 0;
  const send = () =>
    http.handle(
      new Request('http://local/v1/charges', {
        method: 'POST',
        headers: { 'idempotency-key': 'pack-1', 'content-type': 'application/json' },
        body: '{"amount":1}',
      }),
      async () => {
        runs++;
        return Response.json({ id: 'ch_1' }, { status: 201 });
      },
    );
  const first = await send();
  const second = await send();
  assert.equal(first.status, 201);
  assert.equal(second.status, 201);
  assert.equal(second.headers.get(root.REPLAYED_HEADER), 'true');
  assert.deepEqual(await second.json(), { id: 'ch_1' });
  assert.equal(runs, 1, 'the handler ran once');

  // One message delivered twice through idem/consumer: processed, then a duplicate.
  const consumer = new modules['idem/consumer'].IdempotentConsumer({ store, scope: 'orders' });
  let handled = 0;
  const message = { id: 'msg-1', body: new TextEncoder().encode('{"order":1}'), contentType: 'application/json' };
  const handler = async () => void handled++;
  assert.deepEqual(await consumer.consume(message, handler), { action: 'ack', reason: 'processed' });
  assert.deepEqual(await consumer.consume({ ...message, attempt: 2 }, handler), { action: 'ack', reason: 'duplicate' });
  assert.equal(handled, 1, 'the message handler ran once');

  // A phase through Drizzle's own transaction (idem/drizzle) on the same PGlite.
  const { drizzle } = await import('drizzle-orm/pglite');
  const { sql } = await import('drizzle-orm');
  const drizzleStore = new modules['idem/postgres'].PostgresStore({ client: modules['idem/drizzle'].drizzle(drizzle(db)), table: 'idem_drizzle_keys' });
  await drizzleStore.migrate();
  const begun = await new root.IdempotencyEngine({ store: drizzleStore }).begin({
    scope: 'jobs',
    key: 'drizzle-1',
    fingerprint: root.fingerprint({ method: 'JOB', path: 'drizzle', body: null }),
  });
  assert.equal(begun.kind, 'execute');
  assert.equal(await begun.execution.phase('p', async (tx) => (await tx.execute(sql`SELECT 41 + 1 AS n`)).rows[0].n), 42);
} finally {
  await db.close();
}

// The in-memory store behind the Next.js route wrapper (web-standard, no Next needed at run time).
{
  let runs = 0;
  const POST = modules['idem/next'].withIdempotency({ store: new modules['idem/memory'].MemoryStore() }, async (request, _ctx, idem) => {
    runs++;
    return Response.json({ key: idem?.key, body: await request.json() }, { status: 201 });
  });
  const send = () =>
    POST(
      new Request('http://local/api/charges', {
        method: 'POST',
        headers: { 'idempotency-key': 'pack-2', 'content-type': 'application/json' },
        body: '{"amount":2}',
      }),
      {},
    );
  const first = await send();
  const second = await send();
  assert.equal(first.status, 201);
  assert.equal(second.headers.get(root.REPLAYED_HEADER), 'true');
  assert.deepEqual(await second.json(), { key: 'pack-2', body: { amount: 2 } });
  assert.equal(runs, 1, 'the Next route handler ran once on the memory store');
}

// The Node client's file store loads its optional peer on first use.
const dir = mkdtempSync(join(tmpdir(), 'idem-pack-intents-'));
try {
  const store = new modules['idem/client/node'].FileIntentStore({ dir });
  const intent = { key: 'k1', method: 'POST', url: 'http://local/', headers: [], body: null, createdAt: 0, attempts: 0, state: 'pending', updatedAt: 0 };
  await store.put(intent);
  assert.equal((await store.list()).length, 1);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log('smoke: ok');
