/**
 * Citus (README "Citus"): idem's engine on a table distributed by scope, through the
 * coordinator, against the same statements issued raw through the coordinator, side by side in
 * alternating rounds. Skipped (a note in the report) unless CITUS_URL names a coordinator.
 *
 * new request: raw = Citus mode's claim (insert-first) + the finish statement, two autocommit
 *              statements, named; idem = engine.begin() + finish() on `distributed: 'citus'`.
 *              Also raw: plain mode's read-first claim + finish on the same distributed table,
 *              the measurement behind Citus mode's insert-first claim.
 * replay:      raw = the replay read (`readDone`); idem = engine.begin() on a finished key.
 * Keys spread over 64 scopes, so over every shard.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import { distributedStatements, statements } from '../src/postgres/sql.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, FINGERPRINT, HEADERS, type Section } from './lib/fixtures.js';
import { closedLoop, fmtMs, fmtNoise, fmtRate, interleave, ratio } from './lib/measure.js';

const REPLAY_KEYS = 2000;
const SCOPES = 64;
const LEASE_MS = 60_000;
const RETENTION_MS = 86_400_000;
const scopeOf = (i: number) => `t${i % SCOPES}`;

export async function citus(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const url = process.env.CITUS_URL;
  const title = 'Citus: through the coordinator, idem vs the same statements raw (same run)';
  if (!url) return { title, markdown: 'Skipped: CITUS_URL is not set (docs/citus.md starts a local cluster).' };
  const concurrency = cfg.quick ? 16 : 32;
  const pool = new pg.Pool({ connectionString: url, max: concurrency });
  const table = uniqueTable('citus_idem');
  const load = os.loadavg();
  try {
    const store = new PostgresStore({ client: pool, table, distributed: 'citus' });
    await store.migrate();
    await store.distribute();
    await pool.query(
      `INSERT INTO "${table}" (scope, key, fingerprint, state, recovery_point, response_status, response_headers, response_body, finished_at)
       SELECT 't' || (g % ${SCOPES}), 'k' || g, $1, 'done', 'finished', 201, $2::jsonb, $3, now() FROM generate_series(1, ${REPLAY_KEYS}) g`,
      [FINGERPRINT, JSON.stringify(HEADERS), BODY],
    );
    const plain = statements(table);
    const { sql } = distributedStatements(table, plain);
    const engine = new IdempotencyEngine<Queryable>({ store, heartbeatMs: 0 });
    let n = 0;
    const rawNew = (claimText: string, name: string) => async () => {
      const i = n++;
      const key = randomUUID();
      const params = [scopeOf(i), key, FINGERPRINT, LEASE_MS, RETENTION_MS];
      const { rows } = await pool.query({ name, text: claimText, values: params });
      if (rows[0]?.kind !== 'claimed') throw new Error('raw claim did not claim');
      const done = await pool.query({
        name: `${name}_finish`,
        text: sql.finish,
        values: [scopeOf(i), key, rows[0].lock_version, 201, JSON.stringify(HEADERS), BODY, null, null],
      });
      if (done.rows.length !== 1) throw new Error('raw finish matched no row');
    };
    const idemNew = async () => {
      const begun = await engine.begin({ scope: scopeOf(n++), key: randomUUID(), fingerprint: FINGERPRINT });
      if (begun.kind !== 'execute') throw new Error(`expected a claim, got ${begun.kind}`);
      await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
    };
    const key = (i: number) => {
      const g = (i % REPLAY_KEYS) + 1; // as filled above: scope t<g mod SCOPES>, key k<g>
      return { scope: scopeOf(g), key: `k${g}` };
    };
    const rawReplay = async (i: number) => {
      const k = key(i);
      const { rows } = await pool.query({ name: 'citus_raw_read', text: sql.readDone, values: [k.scope, k.key, RETENTION_MS] });
      if (rows[0]?.state !== 'done') throw new Error('raw read found no finished row');
    };
    const idemReplay = async (i: number) => {
      const k = key(i);
      const begun = await engine.begin({ ...k, fingerprint: FINGERPRINT });
      if (begun.kind !== 'replay') throw new Error(`expected a replay, got ${begun.kind}`);
    };
    const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
    const insertFirst = rawNew(sql.claim, 'citus_raw_claim');
    const readFirst = rawNew(plain.claim, 'citus_raw_claim_read_first');
    for (const op of [insertFirst, readFirst, idemNew, rawReplay, idemReplay]) await closedLoop(op, concurrency, Math.max(200, cfg.warmupMs / 5));
    log(`  citus c=${concurrency}: new requests`);
    const fresh = await interleave({ raw: loop(insertFirst), readFirst: loop(readFirst), idem: loop(idemNew) }, cfg.rounds);
    log(`  citus c=${concurrency}: replays`);
    const replay = await interleave({ raw: loop(rawReplay), idem: loop(idemReplay) }, cfg.rounds);
    const version = (await pool.query(`SELECT extversion FROM pg_extension WHERE extname = 'citus'`)).rows[0]?.extversion;
    const workers = (await pool.query(`SELECT count(*)::int AS n FROM pg_dist_node WHERE groupid <> 0 AND noderole = 'primary'`)).rows[0]?.n;
    const lines = [
      `Citus ${version}: a coordinator and ${workers} workers on this machine (loopback), the table distributed by scope (32 shards), keys over ${SCOPES} scopes; ` +
        `one pool of ${concurrency} connections to the coordinator shared by the sides (they run in turn), ${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side; ` +
        `load average at the start ${load.map((l) => l.toFixed(2)).join(' / ')}. ` +
        "*raw*: Citus mode's own statements issued directly (insert-first claim + finish; the replay read); *idem*: the engine on `PostgresStore({ distributed: 'citus' })`; " +
        "*read-first raw*: plain mode's claim statement (read, `INSERT … ON CONFLICT`, `UNION ALL` in one CTE) + finish on the same table. " +
        'A new request through idem is three statements (the replay read that misses, the claim, the finish) against raw two; every statement is a coordinator and a worker round trip.',
      '',
      '| case | raw ops/s | idem ops/s | **idem / raw** | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |',
      '|---|---:|---:|---:|---:|---:|---:|',
      `| new request (claim + finish) | ${fmtRate(fresh.raw.opsPerSec)} | ${fmtRate(fresh.idem.opsPerSec)} | **${ratio(fresh.idem.opsPerSec, fresh.raw.opsPerSec)}** | ` +
        `${fmtMs(fresh.raw.p50Ms)} / ${fmtMs(fresh.raw.p99Ms)} | ${fmtMs(fresh.idem.p50Ms)} / ${fmtMs(fresh.idem.p99Ms)} | ${fmtNoise(fresh.raw.noise)} / ${fmtNoise(fresh.idem.noise)} |`,
      `| replay | ${fmtRate(replay.raw.opsPerSec)} | ${fmtRate(replay.idem.opsPerSec)} | **${ratio(replay.idem.opsPerSec, replay.raw.opsPerSec)}** | ` +
        `${fmtMs(replay.raw.p50Ms)} / ${fmtMs(replay.raw.p99Ms)} | ${fmtMs(replay.idem.p50Ms)} / ${fmtMs(replay.idem.p99Ms)} | ${fmtNoise(replay.raw.noise)} / ${fmtNoise(replay.idem.noise)} |`,
      '',
      `Claim statement on the distributed table, raw, claim + finish: insert-first ${fmtRate(fresh.raw.opsPerSec)} ops/s, read-first ${fmtRate(fresh.readFirst.opsPerSec)} ops/s ` +
        `(**insert-first / read-first ${ratio(fresh.raw.opsPerSec, fresh.readFirst.opsPerSec)}**; p50 ${fmtMs(fresh.raw.p50Ms)} vs ${fmtMs(fresh.readFirst.p50Ms)} ms).`,
    ];
    return {
      title,
      markdown: lines.join('\n'),
      headline: {
        [`Citus new request idem / raw, c=${concurrency}`]: ratio(fresh.idem.opsPerSec, fresh.raw.opsPerSec),
        [`Citus replay idem / raw, c=${concurrency}`]: ratio(replay.idem.opsPerSec, replay.raw.opsPerSec),
      },
    };
  } finally {
    await dropTable(pool, table).catch(() => undefined);
    await pool.end();
  }
}
