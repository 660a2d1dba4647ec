/**
 * A phase's transaction on postgres.js whose connection is cut while the phase body runs
 * (protocol.md H24): postgres.js 3.4.9 writes a statement sent on a closed connection from a
 * `setImmediate` that throws, which would end the process. idem sends nothing on that
 * connection, neither its fenced write nor (through `sql.begin`) a ROLLBACK or COMMIT, and the
 * commit fails with postgres.js's CONNECTION_CLOSED. Here the body catches the error of its own
 * statement and returns, so idem's fenced write would be the next statement. An uncaught
 * exception fails the test. The contract's rows (test/connection-faults.test.ts) cover the
 * body whose error propagates. Real PostgreSQL (DATABASE_URL).
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import postgres from 'postgres';
import type { SqlDriver } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import { postgresjs } from '../src/postgresjs/index.js';
import { tableName } from './helpers/engines.js';
import { startSilentProxy, type SilentProxy } from './helpers/silent-proxy.js';
import { poll, sleep } from './helpers/wait.js';

const fp = (text: string) => createHash('sha256').update(text).digest();
const claimInput = (key: string) => ({ scope: 's', key, fingerprint: fp(key), leaseMs: 10_000, retentionMs: 86_400_000 });
type Tx = (strings: TemplateStringsArray) => Promise<unknown>;

describe('a postgres.js transaction cut under the phase body', { skip: process.env.DATABASE_URL ? false : 'needs DATABASE_URL (real PostgreSQL)' }, () => {
  const target = new URL(process.env.DATABASE_URL ?? 'postgres://x@127.0.0.1:5432/x');
  const direct = postgres(process.env.DATABASE_URL ?? '', { onnotice: () => undefined, max: 1 });
  const tables: string[] = [];
  let proxy: SilentProxy;
  before(async () => {
    proxy = await startSilentProxy({ host: target.hostname, port: Number(target.port || 5432) });
  });
  after(async () => {
    for (const t of tables) await direct.unsafe(`DROP TABLE IF EXISTS "${t}_blobs", "${t}_outbox", "${t}" CASCADE`);
    await direct.end({ timeout: 5 });
    await proxy.close();
  });

  const clients: Array<[string, (sql: postgres.Sql) => Promise<SqlDriver<Tx>>]> = [
    ['postgresjs()', async (sql) => postgresjs(sql) as unknown as SqlDriver<Tx>],
    [
      'Drizzle on postgres.js',
      async (sql) => {
        const { drizzle: onPostgresJs } = await import('drizzle-orm/postgres-js');
        const { drizzle } = await import('../src/drizzle/index.js');
        const db = drizzle(onPostgresJs(sql));
        // Drizzle's tx runs raw SQL through `execute`; the statement below needs only that.
        return db as unknown as SqlDriver<Tx>;
      },
    ],
  ];

  for (const [name, driverOf] of clients) {
    test(`${name}: a body that swallows its statement's connection error fails the commit, and nothing is sent on the closed connection`, {
      timeout: 30_000,
    }, async () => {
      const url = new URL(target);
      url.port = String(proxy.port);
      const sql = postgres(url.toString(), { onnotice: () => undefined, max: 1, connect_timeout: 2 });
      const table = tableName('idem_pgjs_lost');
      tables.push(table);
      const store = new PostgresStore<Tx>({ client: await driverOf(sql), table, storeTimeoutMs: 5_000 });
      try {
        proxy.mode('forward');
        await store.migrate();
        const claimed = await store.claim(claimInput('cut'));
        assert.equal(claimed.kind, 'claimed');
        const ref = { scope: 's', key: 'cut', token: claimed.kind === 'claimed' ? claimed.token : 0 };
        let swallowed: unknown;
        const commit = store.commit(
          ref,
          () => ({ kind: 'phase', phase: 'p', result: null, leaseMs: 10_000 }),
          async (tx) => {
            proxy.mode('stall');
            const statement = (name === 'postgresjs()' ? tx`SELECT 1` : (tx as unknown as { execute(q: string): Promise<unknown> }).execute('SELECT 1')).then(
              () => undefined,
              (error: unknown) => {
                swallowed = error;
              },
            );
            await poll(() => (proxy.held() > 0 ? true : undefined), 10_000, 'the body statement in flight');
            proxy.cut();
            proxy.mode('forward');
            await statement;
            await sleep(100); // the connection's close reaches postgres.js's `begin` too
          },
        );
        await assert.rejects(commit, (e: unknown) => (e as { code?: string }).code === 'CONNECTION_CLOSED');
        // Drizzle wraps the client's error (DrizzleQueryError, with the error as `cause`).
        const seen = swallowed as { code?: string; cause?: { code?: string } } | undefined;
        assert.equal(seen?.code ?? seen?.cause?.code, 'CONNECTION_CLOSED', 'the body saw its statement fail');
        await sleep(200); // a write deferred to a setImmediate would have run (and thrown) by now
        const row = await direct.unsafe(`SELECT recovery_point FROM "${table}" WHERE scope = 's' AND key = 'cut'`);
        assert.equal(row[0]?.recovery_point, 'start', 'the phase did not commit');
        // The client recovers: the next phase on the key commits.
        const again = await store.commit(ref, () => ({ kind: 'phase', phase: 'p', result: null, leaseMs: 10_000 }));
        assert.equal(again.kind, 'ok');
      } finally {
        proxy.mode('forward');
        await sql.end({ timeout: 1 });
      }
    });

    test(`${name}: a body that fails with its own I/O error (ENOENT, a fetch's ECONNRESET) fails the commit with it, and the connection is given back`, {
      timeout: 30_000,
    }, async () => {
      // One connection: were the transaction's connection held for good, the next commit would never get it.
      const sql = postgres(process.env.DATABASE_URL ?? '', { onnotice: () => undefined, max: 1, connect_timeout: 2 });
      const table = tableName('idem_pgjs_ioerr');
      tables.push(table);
      const store = new PostgresStore<Tx>({ client: await driverOf(sql), table, storeTimeoutMs: 5_000 });
      try {
        await store.migrate();
        const claimed = await store.claim(claimInput('io'));
        assert.equal(claimed.kind, 'claimed');
        const ref = { scope: 's', key: 'io', token: claimed.kind === 'claimed' ? claimed.token : 0 };
        for (const [code, syscall] of [
          ['ENOENT', 'open'],
          ['ECONNRESET', 'read'],
        ]) {
          const ioError = Object.assign(new Error(`${code}: the phase's own I/O failed`), { code, syscall });
          const failed = store.commit(
            ref,
            () => ({ kind: 'phase', phase: 'p', result: null, leaseMs: 10_000 }),
            async () => {
              throw new Error('the PSP call failed', { cause: ioError });
            },
          );
          await assert.rejects(failed, (e: unknown) => e === ioError || (e as { cause?: unknown }).cause === ioError);
        }
        const again = await store.commit(ref, () => ({ kind: 'phase', phase: 'p', result: null, leaseMs: 10_000 }));
        assert.equal(again.kind, 'ok', 'the connection came back: the next phase commits');
      } finally {
        await sql.end({ timeout: 1 });
      }
    });
  }
});
