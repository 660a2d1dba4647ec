/**
 * The crash drill's server (suite.mjs): idem on PostgreSQL through pg, `POST /charges` inserts
 * one row in its atomic phase. With HOLD=1 the handler prints `held <id>` after the phase
 * committed and never answers, for the suite to SIGKILL the process there. Prints
 * `listening <port>` when it serves.
 */
import pg from 'pg';
import { PostgresStore } from 'idem/postgres';
import { createApp, serve } from './shared.mjs';

const env = (name) => (globalThis.Deno ? globalThis.Deno.env.get(name) : process.env[name]);
const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 4 });
const table = env('DRILL_TABLE');
const store = new PostgresStore({ client: pool, table: `${table}_keys` });
const hold = env('HOLD') === '1' ? (charge) => (console.log(`held ${charge.id}`), new Promise(() => {})) : undefined;
const app = createApp(
  store,
  async (tx, body) => {
    const { rows } = await tx.query(`INSERT INTO ${table} (amount) VALUES ($1) RETURNING id`, [body.amount]);
    return { id: Number(rows[0].id), amount: body.amount };
  },
  { hold, leaseMs: 1000 },
);
const { port } = await serve(app.fetch);
console.log(`listening ${port}`);
