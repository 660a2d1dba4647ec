/**
 * The plain-table claim path (src/postgres/claim.ts, `replayShare`): is the read-first path,
 * with the lean replay read (`readDone`, sql/claim.ts), cheap enough to take for new requests
 * too, so that the adaptive switch could go? Side by side on PostgreSQL through `pg`, in
 * alternating rounds of one run (issue 26 item 4):
 *
 * new request: idem claim first (the store pinned to it) vs idem read first (pinned): the same
 *              engine.begin() + finish(); and the raw statements of each path (claim + finish
 *              vs a missing `readDone` + claim + finish).
 * replay:      idem read first with the lean `readDone` vs with the whole-record read it
 *              replaced (same engine, the statement text swapped), and the bare primary-key read.
 *
 * Each ratio is the median of the rounds' ops/s over the other's; the spread is the lowest
 * and highest ratio of one round's pair.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { pinClaimPath } from '../src/postgres/claim.js';
import type { Queryable } from '../src/postgres/client.js';
import type { PostgresStore } from '../src/postgres/index.js';
import type { StoreContext } from '../src/postgres/context.js';
import { statements } from '../src/postgres/sql.js';
import { idemSide } from './library.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, FINGERPRINT, fillDone, HEADERS, keyTable, SCOPE, type Section } from './lib/fixtures.js';
import { closedLoop, fmtNoise, fmtRate, interleave, type Sampled } from './lib/measure.js';

const REPLAY_KEYS = 1000;
const LEASE_MS = 60_000;
const RETENTION_MS = 86_400_000;

/**
 * The replay read before the lean ones (issue 18): the whole record's columns, each parsed by the
 * driver, beside the `record` column the store decodes (src/postgres/sql/claim.ts `readDone`).
 */
const wholeRecordRead = (t: string) => `SELECT state, fingerprint, response_status, response_headers, response_body, recovery_point, phase_results,
        lock_version::text AS lock_version, claim_id::text AS claim_id, response_body_ref, response_key_id, created_at,
        created_at <= now() - $3::int8 * interval '1 millisecond' AS retention_expired, (date_part('epoch', created_at - now()) * 1000 + $3::int8) AS retention_remaining_ms,
        json_build_array(lock_version::text, claim_id, created_at, date_part('epoch', created_at - now()) * 1000 + $3::int8,
          response_body_ref, response_key_id, phase_results) AS record
      FROM "${t}" WHERE scope = $1 AND key = $2 AND created_at > now() - $3::int8 * interval '1 millisecond'`;

const contextOf = (store: PostgresStore) => (store as unknown as { ctx: StoreContext }).ctx;

/** `a / b` of the medians, with the lowest and highest ratio of one round's pair. */
function versus(a: Sampled, b: Sampled): string {
  const per = a.rounds.map((r, i) => r / b.rounds[i]!);
  return `**${(a.opsPerSec / b.opsPerSec).toFixed(2)}** (${Math.min(...per).toFixed(2)}–${Math.max(...per).toFixed(2)})`;
}

/** PostgreSQL through pg: claim first vs read first for new requests, lean vs whole-record replay read. */
export async function claimPath(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const table = uniqueTable('claim_path');
  const lines = ['| concurrency | case | A ops/s | B ops/s | A / B (round spread) | noise A / B |', '|---:|---|---:|---:|---:|---:|'];
  const headline: Record<string, string> = {};
  try {
    await keyTable(admin, table);
    await fillDone(admin, table, REPLAY_KEYS);
    const sql = statements(table);
    for (const concurrency of cfg.concurrencies) {
      const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: concurrency });
      try {
        const claimFirst = await keyTable(pool, table);
        const readFirst = await keyTable(pool, table);
        const wholeRead = await keyTable(pool, table);
        pinClaimPath(contextOf(claimFirst), false);
        pinClaimPath(contextOf(readFirst), true);
        pinClaimPath(contextOf(wholeRead), true);
        const whole = contextOf(wholeRead) as { sql: StoreContext['sql'] };
        whole.sql = { ...whole.sql, readDone: wholeRecordRead(table) };
        const cf = idemSide(new IdempotencyEngine<Queryable>({ store: claimFirst }));
        const rf = idemSide(new IdempotencyEngine<Queryable>({ store: readFirst }));
        const wr = idemSide(new IdempotencyEngine<Queryable>({ store: wholeRead }));
        const run = (text: string, values: unknown[], name: string) => pool.query({ name, text, values });
        const rawNew = async (readFirstPath: boolean) => {
          const key = randomUUID();
          if (readFirstPath && (await run(sql.readDone, [SCOPE, key, RETENTION_MS], 'cp_read')).rows.length > 0) throw new Error('a new key was found');
          const { rows } = await run(sql.claim, [SCOPE, key, FINGERPRINT, LEASE_MS, RETENTION_MS], 'cp_claim');
          if (rows[0]?.kind !== 'claimed') throw new Error('raw claim did not claim');
          await run(sql.finish, [SCOPE, key, rows[0].lock_version, 201, JSON.stringify(HEADERS), BODY, null, null], 'cp_finish');
        };
        const bareRead = async (i: number) => {
          const { rows } = await run(
            `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${table}" WHERE scope = $1 AND key = $2`,
            [SCOPE, `k${(i % REPLAY_KEYS) + 1}`],
            'cp_bare',
          );
          if (rows[0]?.state !== 'done') throw new Error('bare read found no finished row');
        };
        const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
        for (const op of [cf.newRequest, rf.newRequest, rf.replay, wr.replay, bareRead, () => rawNew(false), () => rawNew(true)]) {
          await closedLoop(op, concurrency, Math.max(100, cfg.warmupMs / 5));
        }
        log(`  claim path c=${concurrency}: new requests`);
        const n = await interleave(
          { claimFirst: loop(cf.newRequest), readFirst: loop(rf.newRequest), rawClaimFirst: loop(() => rawNew(false)), rawReadFirst: loop(() => rawNew(true)) },
          cfg.rounds,
        );
        log(`  claim path c=${concurrency}: replays`);
        const r = await interleave({ lean: loop(rf.replay), whole: loop(wr.replay), bare: loop(bareRead) }, cfg.rounds);
        const row = (label: string, a: Sampled, b: Sampled) =>
          lines.push(
            `| ${concurrency} | ${label} | ${fmtRate(a.opsPerSec)} | ${fmtRate(b.opsPerSec)} | ${versus(a, b)} | ${fmtNoise(a.noise)} / ${fmtNoise(b.noise)} |`,
          );
        row('new request: idem read first (A) / claim first (B)', n.readFirst, n.claimFirst);
        row('new request: raw read first (A) / claim first (B)', n.rawReadFirst, n.rawClaimFirst);
        row('replay: idem lean read (A) / whole-record read (B)', r.lean, r.whole);
        row('replay: idem lean read (A) / bare PK read (B)', r.lean, r.bare);
        headline[`new request, read first / claim first, c=${concurrency}`] = (n.readFirst.opsPerSec / n.claimFirst.opsPerSec).toFixed(2);
        headline[`replay, lean / whole-record read, c=${concurrency}`] = (r.lean.opsPerSec / r.whole.opsPerSec).toFixed(2);
      } finally {
        await pool.end();
      }
    }
  } finally {
    await dropTable(admin, table);
    await admin.end();
  }
  return { title: 'PostgreSQL: the claim path (read first vs claim first) and the lean replay read', markdown: lines.join('\n'), headline };
}
