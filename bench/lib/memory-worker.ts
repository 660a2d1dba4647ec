/**
 * The app process of the memory bench: pushes `keys` new requests through the engine on the
 * PostgreSQL store (concurrency 64) and prints one JSON line per sample of its own memory,
 * taken after a full GC (--expose-gc), so what is left is what idem keeps per key: nothing
 * should grow with the number of keys.
 *
 *   node --expose-gc --import tsx bench/lib/memory-worker.ts <databaseUrl> <table> <keys>
 *
 * The pool sets synchronous_commit=off for these connections only: the bench measures the
 * app's memory, not commit durability, and 1 M keys at disk-flush speed would take too long.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdempotencyEngine } from '../../src/engine/engine.js';
import type { Queryable } from '../../src/postgres/client.js';
import { PostgresStore } from '../../src/postgres/index.js';
import { BODY, FINGERPRINT, HEADERS, SCOPE } from './fixtures.js';

const [databaseUrl, table, keysArg] = process.argv.slice(2) as [string, string, string];
const keys = Number(keysArg);
const pool = new pg.Pool({ connectionString: databaseUrl, max: 16, options: '-c synchronous_commit=off' });
const store = new PostgresStore({ client: pool, table });
await store.migrate();
const engine = new IdempotencyEngine<Queryable>({ store });
const gc = (globalThis as { gc?: () => void }).gc;
const every = Math.max(1, Math.floor(keys / 20));
let done = 0;
function sample(): void {
  gc?.();
  const m = process.memoryUsage();
  process.stdout.write(JSON.stringify({ keys: done, rss: m.rss, heapUsed: m.heapUsed, external: m.external, t: performance.now() }) + '\n');
}
sample();
let next = 0;
await Promise.all(
  Array.from({ length: 64 }, async () => {
    while (next < keys) {
      next++;
      const begun = await engine.begin({ scope: SCOPE, key: randomUUID(), fingerprint: FINGERPRINT });
      if (begun.kind !== 'execute') throw new Error('memory bench: expected a claim');
      await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
      done++;
      if (done % every === 0) sample();
    }
  }),
);
await pool.end();
