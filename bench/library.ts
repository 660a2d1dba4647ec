/**
 * (1) The physical limit and (2) idem at library level, on PostgreSQL through `pg` and on
 * PGlite, side by side in alternating rounds.
 *
 * new request: raw = idem's own claim statement + idem's own finish statement (1 KB body),
 *              two autocommit statements through the same driver as named (prepared)
 *              statements, exactly as idem issues them; idem = engine.begin() + finish()
 *              with the default heartbeat on.
 * replay:      raw = one primary-key read of the columns a replay needs; idem = engine.begin()
 *              on a finished key. (The raw run of idem's claim statement on an existing key is
 *              shown beside it: the database's share of the gap.)
 * pgbench:     the same statement texts through pgbench -M prepared, parameters inlined.
 */
import { randomUUID } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { statements } from '../src/postgres/sql.js';
import type { Queryable } from '../src/postgres/client.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, fillDone, FINGERPRINT, HEADERS, inlineParams, keyTable, pgbench, pgbenchPath, SCOPE, type Section } from './lib/fixtures.js';
import { closedLoop, fmtMs, fmtNoise, fmtRate, interleave, ratio, type Sampled, type Stats } from './lib/measure.js';

/** Finished keys `k1…k1000` every replay side cycles through. */
export const REPLAY_KEYS = 1000;

/** Why a library ratio can fall short of 0.9 (bench/notes.md, "Profile"). */
const WHY_NEW =
  "both sides issue the same two statements and commits (idem's store claims first while new keys dominate); what is left is idem's JavaScript per request " +
  '(key checks, the engine, the lease heartbeat timer, the fenced finish and its response encoding), which counts where the two cores, not the WAL flush, are the limit.';
const WHY_REPLAY =
  'a replay is one read on both sides; `readDone` returns the raw five columns plus one json column with the rest of the key record (token, claim id, created-at, retention left, phase results). ' +
  "idem's own JavaScript (the engine's decision, the record, the store deadline) is about 3 µs of node CPU per replay; the bare `readDone` statement through pg costs node 1.4-1.7 × the raw read's CPU by itself " +
  '(bench/replay-cpu.ts, bench/notes.md "Replay read"), and on two cores shared with PostgreSQL that is the gap. The replay cache (issue 18 item 2) answers replays with no statement at all.';

const LEASE_MS = 60_000;
const RETENTION_MS = 86_400_000;

export type Run = (text: string, params: unknown[], name: string) => Promise<{ rows: Array<Record<string, unknown>> }>;

/** The raw side: idem's statements on their own table, through the same client. */
export function rawSide(runQuery: Run, table: string) {
  const sql = statements(table);
  const readText = `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${table}" WHERE scope = $1 AND key = $2`;
  return {
    async newRequest(): Promise<void> {
      const key = randomUUID();
      const { rows } = await runQuery(sql.claim, [SCOPE, key, FINGERPRINT, LEASE_MS, RETENTION_MS], `raw_claim_${table}`);
      if (rows[0]?.kind !== 'claimed') throw new Error('raw claim did not claim');
      const done = await runQuery(sql.finish, [SCOPE, key, rows[0].lock_version, 201, JSON.stringify(HEADERS), BODY, null, null], `raw_finish_${table}`);
      if (done.rows.length !== 1) throw new Error('raw finish matched no row');
    },
    async read(i: number): Promise<void> {
      const { rows } = await runQuery(readText, [SCOPE, `k${(i % REPLAY_KEYS) + 1}`], `raw_read_${table}`);
      if (rows[0]?.state !== 'done') throw new Error('raw read found no finished row');
    },
    /** idem's claim statement on a finished key: what a replay would cost the database without the replay fast path. */
    async claimExisting(i: number): Promise<void> {
      const { rows } = await runQuery(sql.claim, [SCOPE, `k${(i % REPLAY_KEYS) + 1}`, FINGERPRINT, LEASE_MS, RETENTION_MS], `raw_claim_${table}`);
      if (rows[0]?.kind !== 'exists') throw new Error('raw claim on an existing key claimed');
    },
  };
}

/** The idem side: the engine on the PostgreSQL store (any client; bench/postgresjs.ts uses it too). */
export function idemSide<Tx>(engine: IdempotencyEngine<Tx>) {
  return {
    async newRequest(): Promise<void> {
      const begun = await engine.begin({ scope: SCOPE, key: randomUUID(), fingerprint: FINGERPRINT });
      if (begun.kind !== 'execute') throw new Error(`expected a claim, got ${begun.kind}`);
      await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
    },
    async replay(i: number): Promise<void> {
      const begun = await engine.begin({ scope: SCOPE, key: `k${(i % REPLAY_KEYS) + 1}`, fingerprint: FINGERPRINT });
      if (begun.kind !== 'replay') throw new Error(`expected a replay, got ${begun.kind}`);
    },
  };
}

/** Finishes the keys {@link idemSide}'s replays read (`k1…k<count>`) through the engine, for a store with no SQL fill. */
export async function seedFinished<Tx>(engine: IdempotencyEngine<Tx>, count = REPLAY_KEYS): Promise<void> {
  for (let i = 1; i <= count; i++) {
    const begun = await engine.begin({ scope: SCOPE, key: `k${i}`, fingerprint: FINGERPRINT });
    if (begun.kind === 'execute') await begun.execution.finish({ status: 201, headers: HEADERS, body: BODY });
  }
}

interface Row {
  concurrency: number;
  rawNew: Sampled;
  idemNew: Sampled;
  rawRead: Sampled;
  idemReplay: Sampled;
  rawClaimExisting?: Sampled;
  pgbenchNew?: number;
  pgbenchRead?: number;
}

function table(rows: Row[], withPgbench: boolean): string {
  const head = withPgbench
    ? '| concurrency | case | raw ops/s | idem ops/s | idem / raw | pgbench ops/s | idem / pgbench | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|'
    : '| concurrency | case | raw ops/s | idem ops/s | idem / raw | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |\n|---:|---|---:|---:|---:|---:|---:|---:|';
  const lines = [head];
  for (const r of rows) {
    for (const [label, raw, idem, bench] of [
      ['new request', r.rawNew, r.idemNew, r.pgbenchNew],
      ['replay', r.rawRead, r.idemReplay, r.pgbenchRead],
    ] as Array<[string, Sampled, Sampled, number | undefined]>) {
      const cells = [
        String(r.concurrency),
        label,
        fmtRate(raw.opsPerSec),
        fmtRate(idem.opsPerSec),
        `**${ratio(idem.opsPerSec, raw.opsPerSec)}**`,
        ...(withPgbench ? [bench === undefined ? 'n/a' : fmtRate(bench), bench === undefined ? 'n/a' : ratio(idem.opsPerSec, bench)] : []),
        `${fmtMs(raw.p50Ms)} / ${fmtMs(raw.p99Ms)}`,
        `${fmtMs(idem.p50Ms)} / ${fmtMs(idem.p99Ms)}`,
        `${fmtNoise(raw.noise)} / ${fmtNoise(idem.noise)}`,
      ];
      lines.push(`| ${cells.join(' | ')} |`);
    }
  }
  return lines.join('\n');
}

/** PostgreSQL through pg, plus pgbench. */
export async function postgresLibrary(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const idemTable = uniqueTable('lib_idem');
  const rawTable = uniqueTable('lib_raw');
  const pgbTable = uniqueTable('lib_pgb');
  const rows: Row[] = [];
  const pgbenchErrors: string[] = [];
  const bin = await pgbenchPath();
  try {
    for (const t of [idemTable, rawTable, pgbTable]) {
      await keyTable(admin, t);
      await fillDone(admin, t, REPLAY_KEYS);
    }
    for (const concurrency of cfg.concurrencies) {
      const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: concurrency });
      try {
        const store = await keyTable(pool, idemTable);
        const engine = new IdempotencyEngine<Queryable>({ store });
        const runQuery: Run = (text, values, name) => pool.query({ name, text, values });
        const raw = rawSide(runQuery, rawTable);
        const idem = idemSide(engine);
        const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
        // Warm up both sides (connections, prepared statements, JIT) before measuring.
        await closedLoop(raw.newRequest, concurrency, Math.max(100, cfg.warmupMs / 5));
        await closedLoop(idem.newRequest, concurrency, Math.max(100, cfg.warmupMs / 5));
        await closedLoop(raw.read, concurrency, Math.max(100, cfg.warmupMs / 5));
        await closedLoop(idem.replay, concurrency, Math.max(100, cfg.warmupMs / 5));
        log(`  pg c=${concurrency}: new requests`);
        const n = await interleave({ raw: loop(raw.newRequest), idem: loop(idem.newRequest) }, cfg.rounds);
        log(`  pg c=${concurrency}: replays`);
        const replayCases: Record<string, () => Promise<Stats>> = { raw: loop(raw.read), idem: loop(idem.replay) };
        if (concurrency === 16) replayCases.claim = loop(raw.claimExisting);
        const r = await interleave(replayCases, cfg.rounds);
        const row: Row = { concurrency, rawNew: n.raw, idemNew: n.idem, rawRead: r.raw!, idemReplay: r.idem! };
        if (r.claim) row.rawClaimExisting = r.claim;
        rows.push(row);
      } finally {
        await pool.end();
      }
      if (bin) {
        // pgbench runs after the pool is closed, so its connections never add to ours.
        const sql = statements(pgbTable);
        const key = `('p' || :client_id || '-' || :r)`;
        const newScript = [
          `\\set r random(1, 1000000000000)`,
          inlineParams(sql.claim, { 1: `'${SCOPE}'`, 2: key, 3: `'\\x${'07'.repeat(32)}'::bytea`, 4: String(LEASE_MS), 5: String(RETENTION_MS) }).replace(
            /\s+/g,
            ' ',
          ) + ';',
          // pgbench cannot capture a row with NULL columns (\gset), so the token is the
          // session's last value of the token sequence: the one this claim just drew.
          inlineParams(sql.finish, {
            1: `'${SCOPE}'`,
            2: key,
            3: `currval('"${pgbTable}_lock_version_seq"')`,
            4: '201',
            5: `'${JSON.stringify(HEADERS)}'`,
            6: `'\\x${'78'.repeat(1024)}'::bytea`,
            7: 'NULL', // inline body: no blob id
            8: 'NULL', // not encrypted: no key id
          }).replace(/\s+/g, ' ') + ';',
        ].join('\n');
        const readScript = [
          `\\set k random(1, ${REPLAY_KEYS})`,
          `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${pgbTable}" WHERE scope = '${SCOPE}' AND key = 'k' || :k;`,
        ].join('\n');
        log(`  pgbench c=${concurrency}`);
        try {
          // pgbench's -T includes connecting its clients, which took 3.5 s for 64 clients on a
          // busy 2-core machine; a run that ends before they connect prints no tps.
          const seconds = cfg.pgbenchS + Math.ceil(concurrency / 8);
          rows.at(-1)!.pgbenchNew = (await pgbench(bin, cfg.databaseUrl, newScript, concurrency, seconds)).tps;
          rows.at(-1)!.pgbenchRead = (await pgbench(bin, cfg.databaseUrl, readScript, concurrency, seconds)).tps;
        } catch (error) {
          pgbenchErrors.push(`pgbench at concurrency ${concurrency} failed: ${(error as Error).message.split('\n')[0]}`);
          log(`  ${pgbenchErrors.at(-1)}`);
        }
      }
    }
  } finally {
    for (const t of [idemTable, rawTable, pgbTable]) await dropTable(admin, t);
    await admin.end();
  }
  const at16 = rows.find((r) => r.concurrency === 16) ?? rows[0]!;
  const chart: Record<string, Array<[number, number]>> = {
    'raw new request (pg)': rows.map((r) => [r.concurrency, r.rawNew.opsPerSec]),
    'idem new request (pg)': rows.map((r) => [r.concurrency, r.idemNew.opsPerSec]),
    'raw PK read (pg)': rows.map((r) => [r.concurrency, r.rawRead.opsPerSec]),
    'idem replay (pg)': rows.map((r) => [r.concurrency, r.idemReplay.opsPerSec]),
  };
  if (rows.every((r) => r.pgbenchNew !== undefined)) {
    chart['pgbench new request'] = rows.map((r) => [r.concurrency, r.pgbenchNew!]);
    chart['pgbench PK read'] = rows.map((r) => [r.concurrency, r.pgbenchRead!]);
  }
  const claimNote = at16.rawClaimExisting
    ? `\n\nAt concurrency 16, idem's claim statement run raw on a finished key (what a replay would cost without the read-first path, which the store takes while replays dominate): ` +
      `${fmtRate(at16.rawClaimExisting.opsPerSec)} ops/s = ${ratio(at16.rawClaimExisting.opsPerSec, at16.rawRead.opsPerSec)} of the bare PK read.`
    : '';
  return {
    title: 'PostgreSQL: idem vs the same statements raw (library level)',
    markdown:
      table(rows, bin !== undefined) +
      claimNote +
      pgbenchErrors.map((e) => `\n\n${e}`).join('') +
      (bin ? '' : '\n\npgbench was not found (set PGBENCH=/path/to/pgbench); its columns are n/a.'),
    chart,
    targets: Object.fromEntries(
      rows.flatMap((r) => [
        [
          `lib-new-${r.concurrency}`,
          {
            value: r.idemNew.opsPerSec / r.rawNew.opsPerSec,
            detail: `${fmtRate(r.idemNew.opsPerSec)} / ${fmtRate(r.rawNew.opsPerSec)} ops/s, noise ${fmtNoise(r.idemNew.noise)} / ${fmtNoise(r.rawNew.noise)}`,
            whyMissed: WHY_NEW,
          },
        ],
        [
          `lib-replay-${r.concurrency}`,
          {
            value: r.idemReplay.opsPerSec / r.rawRead.opsPerSec,
            detail: `${fmtRate(r.idemReplay.opsPerSec)} / ${fmtRate(r.rawRead.opsPerSec)} ops/s, noise ${fmtNoise(r.idemReplay.noise)} / ${fmtNoise(r.rawRead.noise)}`,
            whyMissed: WHY_REPLAY,
          },
        ],
      ]),
    ),
    headline: {
      'new request, idem / raw, c=16': ratio(at16.idemNew.opsPerSec, at16.rawNew.opsPerSec),
      'replay, idem / raw, c=16': ratio(at16.idemReplay.opsPerSec, at16.rawRead.opsPerSec),
      'new request, idem / pgbench, c=16': at16.pgbenchNew ? ratio(at16.idemNew.opsPerSec, at16.pgbenchNew) : 'n/a',
      'replay, idem / pgbench, c=16': at16.pgbenchRead ? ratio(at16.idemReplay.opsPerSec, at16.pgbenchRead) : 'n/a',
    },
  };
}

/** Embedded PGlite (in memory, one connection): idem vs the same statements raw. */
export async function pgliteLibrary(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const db = new PGlite();
  const rows: Row[] = [];
  try {
    const idemTable = 'lib_idem';
    const rawTable = 'lib_raw';
    const store = await keyTable(db, idemTable);
    await keyTable(db, rawTable);
    await fillDone(db, idemTable, REPLAY_KEYS);
    await fillDone(db, rawTable, REPLAY_KEYS);
    const engine = new IdempotencyEngine<Queryable>({ store });
    const raw = rawSide((text, params) => db.query(text, params), rawTable);
    const idem = idemSide(engine);
    for (const concurrency of cfg.pgliteConcurrencies) {
      const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
      await closedLoop(raw.newRequest, concurrency, Math.max(100, cfg.warmupMs / 5));
      await closedLoop(idem.newRequest, concurrency, Math.max(100, cfg.warmupMs / 5));
      log(`  pglite c=${concurrency}`);
      const n = await interleave({ raw: loop(raw.newRequest), idem: loop(idem.newRequest) }, cfg.rounds);
      const r = await interleave({ raw: loop(raw.read), idem: loop(idem.replay) }, cfg.rounds);
      rows.push({ concurrency, rawNew: n.raw, idemNew: n.idem, rawRead: r.raw, idemReplay: r.idem });
    }
  } finally {
    await db.close();
  }
  return {
    title: 'PGlite (embedded, in memory): idem vs the same statements raw',
    markdown: table(rows, false),
    chart: {
      'idem new request (PGlite)': rows.map((r) => [r.concurrency, r.idemNew.opsPerSec]),
      'idem replay (PGlite)': rows.map((r) => [r.concurrency, r.idemReplay.opsPerSec]),
    },
  };
}
