/**
 * idem on postgres.js (`idem/postgresjs`) vs the same statements raw through the same
 * postgres.js client, side by side in alternating rounds (issue 14 item 3).
 *
 * new request: raw = idem's claim statement + idem's finish statement (1 KB body) as
 *              prepared statements (`sql.unsafe(text, params, { prepare: true })`), the
 *              headers bound as postgres.js binds JSON (the value itself); idem =
 *              engine.begin() + finish() with the default heartbeat on.
 * replay:      raw = one primary-key read of the columns a replay needs; idem = engine.begin()
 *              on a finished key.
 * Round trips: postgres.js sends a prepared statement already parsed on its connection as
 * Bind + Execute in one write, so each statement is one round trip; the raw new request is
 * two, the raw replay one. idem's are counted beside the figures (statements per operation,
 * from postgres.js's `debug` hook), so a ratio below 1 shows where it comes from.
 * Pipelining: postgres.js pipelines statements sent concurrently on one connection, but each
 * statement of idem's request path needs the previous one's answer (the claim's token for the
 * finish), so there is nothing to send together; a new request's round trips are the claim's
 * (two, `readDone` then `claim`, until the one-statement claim of issue 18 is in).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import postgres from 'postgres';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { PostgresStore } from '../src/postgres/index.js';
import { statements } from '../src/postgres/sql.js';
import { postgresjs as driverOf } from '../src/postgresjs/index.js';
import { idemSide } from './library.js';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { BODY, dropTable, FINGERPRINT, fillDone, HEADERS, keyTable, SCOPE, type Section } from './lib/fixtures.js';
import { closedLoop, comparisonCells, interleave, ratio, type Sampled } from './lib/measure.js';

const REPLAY_KEYS = 1000;
const LEASE_MS = 60_000;
const RETENTION_MS = 86_400_000;

interface Row {
  concurrency: number;
  cases: Array<{ label: string; raw: Sampled; idem: Sampled; rawStatements: number; idemStatements: number }>;
}

/** Counts the statements postgres.js sends (its `debug` hook), per operation of a warm-up run. */
class StatementCounter {
  count = 0;
  readonly hook = () => void this.count++;
  async per(op: (i: number) => Promise<void>, runs = 50): Promise<number> {
    const before = this.count;
    for (let i = 0; i < runs; i++) await op(i);
    return (this.count - before) / runs;
  }
}

/** The raw side: idem's statements on their own table, prepared, through the postgres.js client. */
function rawSide(sql: postgres.Sql, table: string) {
  const text = statements(table);
  const read = `SELECT state, fingerprint, response_status, response_headers, response_body FROM "${table}" WHERE scope = $1 AND key = $2`;
  const prepared = (query: string, params: unknown[]) => sql.unsafe(query, params as never[], { prepare: true });
  return {
    async newRequest(): Promise<void> {
      const key = randomUUID();
      const [claimed] = await prepared(text.claim, [SCOPE, key, FINGERPRINT, LEASE_MS, RETENTION_MS]);
      if (claimed?.kind !== 'claimed') throw new Error('raw claim did not claim');
      const done = await prepared(text.finish, [SCOPE, key, claimed.lock_version, 201, HEADERS, BODY, null, null]);
      if (done.length !== 1) throw new Error('raw finish matched no row');
    },
    async replay(i: number): Promise<void> {
      const [row] = await prepared(read, [SCOPE, `k${(i % REPLAY_KEYS) + 1}`]);
      if (row?.state !== 'done') throw new Error('raw read found no finished row');
    },
  };
}

function table(rows: Row[]): string {
  const lines = [
    '| concurrency | case | raw ops/s | idem ops/s | idem / raw | statements raw / idem | raw p50 / p99 ms | idem p50 / p99 ms | noise raw / idem |',
    '|---:|---|---:|---:|---:|---:|---:|---:|---:|',
  ];
  const cells = rows.flatMap((r) =>
    r.cases.map((c) => {
      const { rates, spread } = comparisonCells(c.raw, c.idem);
      return [String(r.concurrency), c.label, ...rates, `${c.rawStatements} / ${c.idemStatements}`, ...spread];
    }),
  );
  return [...lines, ...cells.map((row) => `| ${row.join(' | ')} |`)].join('\n');
}

/** PostgreSQL through postgres.js: idem vs the same statements raw on the same client. */
export async function postgresjs(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const [idemTable, rawTable] = [uniqueTable('pgjs_idem'), uniqueTable('pgjs_raw')];
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const rows: Row[] = [];
  try {
    for (const t of [idemTable, rawTable]) {
      await keyTable(admin, t);
      await fillDone(admin, t, REPLAY_KEYS);
    }
    for (const concurrency of cfg.concurrencies) {
      const counter = new StatementCounter();
      const sql = postgres(cfg.databaseUrl, { max: concurrency, onnotice: () => undefined, debug: counter.hook });
      try {
        const store = new PostgresStore({ client: driverOf(sql), table: idemTable });
        const engine = new IdempotencyEngine({ store });
        const raw = rawSide(sql, rawTable);
        const idem = idemSide(engine);
        const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, concurrency, cfg.caseMs);
        // Warm up (connections, prepared statements, JIT) and count statements per operation.
        const perOp = {
          rawNew: await counter.per(raw.newRequest),
          idemNew: await counter.per(idem.newRequest),
          rawReplay: await counter.per(raw.replay),
          idemReplay: await counter.per(idem.replay),
        };
        for (const op of [raw.newRequest, idem.newRequest, raw.replay, idem.replay]) await closedLoop(op, concurrency, Math.max(100, cfg.warmupMs / 5));
        log(`  postgres.js c=${concurrency}: new requests`);
        const n = await interleave({ raw: loop(raw.newRequest), idem: loop(idem.newRequest) }, cfg.rounds);
        log(`  postgres.js c=${concurrency}: replays`);
        const r = await interleave({ raw: loop(raw.replay), idem: loop(idem.replay) }, cfg.rounds);
        rows.push({
          concurrency,
          cases: [
            { label: 'new request', raw: n.raw, idem: n.idem, rawStatements: perOp.rawNew, idemStatements: perOp.idemNew },
            { label: 'replay', raw: r.raw, idem: r.idem, rawStatements: perOp.rawReplay, idemStatements: perOp.idemReplay },
          ],
        });
      } finally {
        await sql.end({ timeout: 5 });
      }
    }
  } finally {
    for (const t of [idemTable, rawTable]) await dropTable(admin, t);
    await admin.end();
  }
  const at16 = rows.find((r) => r.concurrency === 16) ?? rows[0]!;
  const [n16, r16] = at16.cases;
  const newRatio = n16!.idem.opsPerSec / n16!.raw.opsPerSec;
  const replayRatio = r16!.idem.opsPerSec / r16!.raw.opsPerSec;
  const section: Section = {
    title: 'postgres.js: idem vs the same statements raw (library level)',
    markdown:
      table(rows) +
      '\n\n*statements raw / idem*: statements sent per operation (postgres.js `debug` hook, warm-up); on a warm connection each is one round trip.',
    chart: {
      'idem new request (postgres.js)': rows.map((r) => [r.concurrency, r.cases[0]!.idem.opsPerSec]),
      'idem replay (postgres.js)': rows.map((r) => [r.concurrency, r.cases[1]!.idem.opsPerSec]),
    },
    headline: {
      'postgres.js new request, idem / raw, c=16': ratio(n16!.idem.opsPerSec, n16!.raw.opsPerSec),
      'postgres.js replay, idem / raw, c=16': ratio(r16!.idem.opsPerSec, r16!.raw.opsPerSec),
    },
  };
  // The report's target (bench/lib/targets.ts, id `postgresjs`, where the suite has targets):
  // the lower of the two ratios at c=16, both beside it.
  return Object.assign(section, {
    targets: {
      postgresjs: {
        value: Math.min(newRatio, replayRatio),
        detail: `c=${at16.concurrency}: new request ${newRatio.toFixed(2)}, replay ${replayRatio.toFixed(2)} (statements raw / idem: ${n16!.rawStatements} / ${n16!.idemStatements}, ${r16!.rawStatements} / ${r16!.idemStatements})`,
        whyMissed:
          replayRatio <= newRatio
            ? 'the lower of the two is the replay: one read on both sides (the statement counts beside it); idem reads the raw five columns plus one json column with the rest of the key record ' +
              '(token, claim id, created-at, retention left, phase results), which postgres.js parses as it arrives, and the engine decides and builds the record in JavaScript, as on pg (the library rows, bench/notes.md "Replay read").'
            : 'the lower of the two is the new request: the same statements on both sides (the counts beside it); what is left is idem in JavaScript per request (key checks, the engine, the lease heartbeat timer, the fenced finish and its response encoding), as on pg (the library rows).',
      },
    },
  });
}
