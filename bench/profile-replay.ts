/**
 * Profiling aid (not part of the suite): runs one side alone for a few seconds so that
 * `node --cpu-prof --import tsx bench/profile-replay.ts <idem|raw> <new|replay>` shows where
 * idem's time goes. Uses its own table and drops it.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, fillDone, FINGERPRINT, HEADERS, keyTable, SCOPE } from './lib/fixtures.js';
import { closedLoop } from './lib/measure.js';

const [side = 'idem', kind = 'replay', seconds = '5'] = process.argv.slice(2);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 16 });
const table = uniqueTable('profile');
const store = await keyTable(pool, table);
await fillDone(pool, table, 1000);
const engine = new IdempotencyEngine<Queryable>({ store });
const read = `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${table}" WHERE scope = $1 AND key = $2`;
const op =
  kind === 'replay'
    ? side === 'idem'
      ? (i: number) => engine.begin({ scope: SCOPE, key: `k${(i % 1000) + 1}`, fingerprint: FINGERPRINT })
      : (i: number) => pool.query({ name: 'p_read', text: read, values: [SCOPE, `k${(i % 1000) + 1}`] })
    : async () => {
        const begun = await engine.begin({ scope: SCOPE, key: randomUUID(), fingerprint: FINGERPRINT });
        if (begun.kind === 'execute') await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
      };
const stats = await closedLoop(op, 16, Number(seconds) * 1000);
console.log(side, kind, Math.round(stats.opsPerSec), 'ops/s');
await dropTable(pool, table);
await pool.end();
