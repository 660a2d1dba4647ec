/**
 * (5) idem against DBOS Transact (@dbos-inc/dbos-sdk, transactions through lib/dbos-pg-datasource.ts), on the
 * same PostgreSQL server, in a database of their own made for the run and dropped after it.
 *
 * The same charge on both: insert a charge row, call the payment provider (an in-process
 * function: the bench measures the bookkeeping, not a network), update the row.
 * - idem: engine.begin(key) → phase `insert` (the row and the recovery point in one
 *   transaction) → call `psp` (recorded as a phase) → finish (the update and the response in one
 *   transaction); a duplicate of a finished key is a replay.
 * - DBOS: a workflow whose ID is the idempotency key, with the insert and the update as DBOS
 *   transactions (`registerTransaction` on a pg data source, lib/dbos-pg-datasource.ts: the
 *   business write and DBOS's checkpoint commit together) and the call as a step; a duplicate starts the
 *   workflow again with the same ID and gets its recorded result.
 *
 * Statements per intent are counted in the process: every `query` that reaches a
 * node-postgres `Client` (idem, DBOS's system database pool and the data source all use it), BEGIN and
 * COMMIT included, over sequential intents, minus what the process issues idle over the same
 * time (DBOS's background work).
 *
 * The race: `duplicates` concurrent calls of one fresh key, on each side: how often each step
 * ran, what the callers got, how long they waited.
 */
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { setImmediate as tick } from 'node:timers/promises';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { BenchConfig } from './lib/config.js';
import { PgDataSource } from './lib/dbos-pg-datasource.js';
import { FINGERPRINT, HEADERS, type Section } from './lib/fixtures.js';
import { closedLoop, fmtMs, fmtNoise, fmtRate, interleave, ratio, type Sampled } from './lib/measure.js';

/** Every statement a node-postgres Client sends in this process. */
let statements = 0;
let counting = false;
function countStatements(): void {
  if (counting) return;
  counting = true;
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const query = proto.query;
  proto.query = function (this: unknown, ...args: unknown[]) {
    statements++;
    return query.apply(this, args);
  };
}

/** How often each step of a charge ran, by key. */
type Steps = { insert: number; psp: number; update: number };

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[s.length >> 1]! : NaN;
};

export async function dbos(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const { DBOS } = await import('@dbos-inc/dbos-sdk');
  countStatements();
  const admin = new pg.Client({ connectionString: cfg.databaseUrl });
  await admin.connect();
  const dbName = `idem_bench_dbos_${process.pid}_${Math.floor(Math.random() * 1e6)}`;
  await admin.query(`CREATE DATABASE ${dbName}`);
  const url = new URL(cfg.databaseUrl);
  url.pathname = `/${dbName}`;
  const dbUrl = url.toString();
  const pool = new pg.Pool({ connectionString: dbUrl, max: 16 });
  // DBOS's system database runs on a pool of ours: its connections' errors at the final DROP
  // DATABASE … (FORCE) are heard, not fatal.
  const systemPool = new pg.Pool({ connectionString: dbUrl, max: 16 });
  for (const p of [pool, systemPool]) p.on('error', () => undefined);
  const steps = new Map<string, Steps>();
  const step = (key: string, name: keyof Steps) => {
    let s = steps.get(key);
    if (!s) {
      s = { insert: 0, psp: 0, update: 0 };
      steps.set(key, s);
    }
    s[name]++;
  };
  /** The payment provider: in process, one event-loop turn, counted. */
  const psp = async (key: string) => {
    step(key, 'psp');
    await tick();
    return `ch_${key.slice(0, 8)}`;
  };
  const body = (id: unknown, charge: string) => new TextEncoder().encode(JSON.stringify({ id: String(id), charge, status: 'paid' }));
  let launched = false;
  try {
    await pool.query(`CREATE TABLE charges_idem (id bigserial PRIMARY KEY, key text UNIQUE NOT NULL, amount int NOT NULL, state text NOT NULL, psp text)`);
    await pool.query(`CREATE TABLE charges_dbos (id bigserial PRIMARY KEY, key text UNIQUE NOT NULL, amount int NOT NULL, state text NOT NULL, psp text)`);

    // idem: the engine on the PostgreSQL store (defaults), and one in wait mode for the race.
    const store = new PostgresStore({ client: pool, table: 'idem_keys' });
    await store.migrate();
    const waitStore = new PostgresStore({ client: pool, table: 'idem_keys_wait', notify: true });
    await waitStore.migrate();
    const engine = new IdempotencyEngine<Queryable>({ store });
    // The same store with the replay cache on (an option, off by default: protocol.md K20), for
    // duplicates only: shown beside the default, the target row stays on the default.
    const cachedEngine = new IdempotencyEngine<Queryable>({ store, replayCache: {} });
    const waitEngine = new IdempotencyEngine<Queryable>({ store: waitStore, inProgress: { wait: 10_000 } });
    const idemCharge =
      (e: IdempotencyEngine<Queryable>) =>
      async (key: string): Promise<string> => {
        const begun = await e.begin({ scope: 'charges', key, fingerprint: FINGERPRINT });
        if (begun.kind !== 'execute') return begun.kind;
        const ex = begun.execution;
        const id = await ex.phase('insert', async (tx) => {
          step(key, 'insert');
          return (await tx.query(`INSERT INTO charges_idem (key, amount, state) VALUES ($1, 100, 'pending') RETURNING id`, [key])).rows[0]!.id;
        });
        const charge = await ex.call('psp', () => psp(key));
        await ex.finish(async (tx) => {
          step(key, 'update');
          await tx.query(`UPDATE charges_idem SET state = 'paid', psp = $2 WHERE id = $1`, [id, charge]);
          return { status: 201, headers: HEADERS, body: body(id, charge) };
        });
        return 'executed';
      };

    // DBOS: the insert and the update as transactions on the data source, the call a step.
    const ds = new PgDataSource('app', pool);
    const insertTx = ds.registerTransaction(async (key: string) => {
      step(key, 'insert');
      return String(
        (await PgDataSource.client.query(`INSERT INTO charges_dbos (key, amount, state) VALUES ($1, 100, 'pending') RETURNING id`, [key])).rows[0].id,
      );
    }, 'insertCharge');
    const updateTx = ds.registerTransaction(async (key: string, id: string, charge: string) => {
      step(key, 'update');
      await PgDataSource.client.query(`UPDATE charges_dbos SET state = 'paid', psp = $2 WHERE id = $1`, [id, charge]);
    }, 'updateCharge');
    const chargeWorkflow = DBOS.registerWorkflow(
      async (key: string) => {
        const id = await insertTx(key);
        const charge = await DBOS.runStep(() => psp(key), { name: 'psp' });
        await updateTx(key, id, charge);
        return { status: 201, body: JSON.stringify({ id, charge, status: 'paid' }) };
      },
      { name: 'charge' },
    );
    DBOS.setConfig({ name: 'idem-bench', systemDatabaseUrl: dbUrl, systemDatabasePool: systemPool, logLevel: 'error' });
    await DBOS.launch();
    launched = true;
    const dbosCharge = async (key: string): Promise<string> => {
      // The workflow called directly under its ID: its result when it completes here, or the
      // recorded (or awaited) result of the execution that owns the ID.
      const result = await DBOS.withNextWorkflowID(key, () => chargeWorkflow(key));
      return result?.status === 201 ? 'result' : 'other';
    };

    const sides = { idem: idemCharge(engine), idemCached: idemCharge(cachedEngine), dbos: dbosCharge };
    const expectNew = (side: keyof typeof sides, prefix: string) => async () => {
      const outcome = await sides[side](`${prefix}-${randomUUID()}`);
      if (outcome !== 'executed' && outcome !== 'result') throw new Error(`${side}: a new charge answered ${outcome}`);
    };
    // Duplicates: finished keys, seeded once per side.
    const seeded = Array.from({ length: cfg.quick ? 32 : 200 }, () => randomUUID());
    for (let i = 0; i < seeded.length; i += 8) {
      await Promise.all(seeded.slice(i, i + 8).flatMap((key) => [sides.idem(key), sides.dbos(key)]));
    }
    // The cache fills on a key's first replay, as a process's would.
    for (const key of seeded) {
      if ((await sides.idemCached(key)) !== 'replay') throw new Error('idem (replay cache): a seeded key did not replay');
    }
    const duplicate = (side: keyof typeof sides) => async (i: number) => {
      const outcome = await sides[side](seeded[i % seeded.length]!);
      if (outcome !== 'replay' && outcome !== 'result') throw new Error(`${side}: a duplicate answered ${outcome}`);
    };

    // Statements per intent (sequential, minus the idle rate over the same time).
    const perIntent = async (op: () => Promise<void>, n: number) => {
      const before = statements;
      const t0 = performance.now();
      for (let i = 0; i < n; i++) await op();
      const ms = performance.now() - t0;
      const used = statements - before;
      const idleBefore = statements;
      const idleMs = Math.min(ms, cfg.quick ? 200 : 2000);
      await new Promise((resolve) => setTimeout(resolve, idleMs));
      const idle = ((statements - idleBefore) * ms) / idleMs;
      return (used - idle) / n;
    };
    const n = cfg.quick ? 5 : 100;
    const counts = {
      idemNew: await perIntent(expectNew('idem', 'count'), n),
      dbosNew: await perIntent(expectNew('dbos', 'count'), n),
      idemDup: await perIntent(() => duplicate('idem')(0), n),
      dbosDup: await perIntent(() => duplicate('dbos')(1), n),
    };
    log(
      `  statements per intent: idem ${counts.idemNew.toFixed(1)} new / ${counts.idemDup.toFixed(1)} dup, DBOS ${counts.dbosNew.toFixed(1)} / ${counts.dbosDup.toFixed(1)}`,
    );

    const rows: Array<{ c: number; idemNew: Sampled; dbosNew: Sampled; idemDup: Sampled; dbosDup: Sampled; idemCachedDup: Sampled }> = [];
    for (const c of cfg.quick ? [16] : [1, 16]) {
      const loop = (op: (i: number) => Promise<void>) => () => closedLoop(op, c, cfg.caseMs);
      log(`  DBOS c=${c}: new charges`);
      const fresh = await interleave({ idem: loop(expectNew('idem', 'new')), dbos: loop(expectNew('dbos', 'new')) }, cfg.rounds);
      log(`  DBOS c=${c}: duplicates`);
      const dup = await interleave({ idem: loop(duplicate('idem')), dbos: loop(duplicate('dbos')), idemCached: loop(duplicate('idemCached')) }, cfg.rounds);
      rows.push({ c, idemNew: fresh.idem, dbosNew: fresh.dbos, idemDup: dup.idem, dbosDup: dup.dbos, idemCachedDup: dup.idemCached });
    }

    // The race: K concurrent calls of one fresh key.
    const racers = { idem: idemCharge(engine), 'idem (wait mode)': idemCharge(waitEngine), dbos: dbosCharge };
    const race: Array<{ side: string; steps: Steps[]; outcomes: Map<string, number>; waitMs: number[]; errors: number }> = [];
    log(`  race: ${cfg.duplicateTrials} trials of ${cfg.duplicates} concurrent duplicates`);
    for (const [side, run] of Object.entries(racers)) {
      const r = { side, steps: [] as Steps[], outcomes: new Map<string, number>(), waitMs: [] as number[], errors: 0 };
      log(`    ${side}`);
      for (let t = 0; t < cfg.duplicateTrials; t++) {
        const key = `race-${randomUUID()}`;
        const settled = await Promise.allSettled(
          Array.from({ length: cfg.duplicates }, async () => {
            const t0 = performance.now();
            const outcome = await run(key);
            return { outcome, ms: performance.now() - t0 };
          }),
        );
        for (const s of settled) {
          if (s.status === 'rejected') {
            r.errors++;
            const name = `${(s.reason as Error)?.name ?? 'error'}: ${String((s.reason as Error)?.message ?? s.reason).slice(0, 60)}`;
            r.outcomes.set(name, (r.outcomes.get(name) ?? 0) + 1);
            continue;
          }
          r.outcomes.set(s.value.outcome, (r.outcomes.get(s.value.outcome) ?? 0) + 1);
          if (s.value.outcome !== 'executed') r.waitMs.push(s.value.ms);
        }
        r.steps.push(steps.get(key) ?? { insert: 0, psp: 0, update: 0 });
      }
      race.push(r);
    }

    const lines = [
      `Both on the same PostgreSQL server, in one database made for the run. The charge: insert a row, call the provider (in process), update the row. ` +
        `idem: \`engine.begin\`, phase \`insert\`, call \`psp\`, finish with the update (default store and engine). ` +
        `DBOS Transact 5.3.0: a workflow whose ID is the idempotency key; insert and update as DBOS transactions (a pg data source on the SDK's data source contract, bench/lib/dbos-pg-datasource.ts: the write and DBOS's checkpoint commit together), the call as a step. ` +
        `A duplicate is the same call with a finished key. ${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side.`,
      '',
      '| concurrency | case | idem ops/s | DBOS ops/s | **idem / DBOS** | idem p50 / p99 ms | DBOS p50 / p99 ms | noise idem / DBOS |',
      '|---:|---|---:|---:|---:|---:|---:|---:|',
    ];
    for (const r of rows) {
      for (const [label, a, b] of [
        ['new charge', r.idemNew, r.dbosNew],
        ['duplicate', r.idemDup, r.dbosDup],
        ['duplicate, idem with `replayCache` on', r.idemCachedDup, r.dbosDup],
      ] as Array<[string, Sampled, Sampled]>) {
        lines.push(
          `| ${r.c} | ${label} | ${fmtRate(a.opsPerSec)} | ${fmtRate(b.opsPerSec)} | **${ratio(a.opsPerSec, b.opsPerSec)}** | ${fmtMs(a.p50Ms)} / ${fmtMs(a.p99Ms)} | ${fmtMs(b.p50Ms)} / ${fmtMs(b.p99Ms)} | ${fmtNoise(a.noise)} / ${fmtNoise(b.noise)} |`,
        );
      }
    }
    lines.push(
      '',
      `Statements per intent (every \`query\` a node-postgres client sent, BEGIN and COMMIT included; ${n} sequential intents, minus the idle rate of the process over the same time): ` +
        `**new charge: idem ${counts.idemNew.toFixed(1)}, DBOS ${counts.dbosNew.toFixed(1)}; duplicate: idem ${counts.idemDup.toFixed(1)}, DBOS ${counts.dbosDup.toFixed(1)}**.`,
      '',
      `**The race**: ${cfg.duplicateTrials} trials of ${cfg.duplicates} concurrent calls of one fresh key. *Steps ran* is insert / psp / update per trial (correct: 1 / 1 / 1 every time); ` +
        "*callers got* counts every answer over all trials (`executed`: ran the work; `in-progress`: idem's 409; `replay`: the stored response; `result`: DBOS returned the workflow's result); " +
        '*waited* is the time of the callers that did not run the work (median / max ms).',
      '',
      '| side | steps ran per trial | correct | callers got | waited median / max ms |',
      '|---|---|---|---|---:|',
    );
    for (const r of race) {
      const correct = r.steps.every((s) => s.insert === 1 && s.psp === 1 && s.update === 1);
      const distinct = [...new Set(r.steps.map((s) => `${s.insert}/${s.psp}/${s.update}`))];
      lines.push(
        `| ${r.side} | ${distinct.join(', ')} | ${correct ? '**yes**' : '**no**'} | ${[...r.outcomes].map(([k, v]) => `${k} ${v}`).join(', ')} | ${fmtMs(median(r.waitMs))} / ${fmtMs(Math.max(...r.waitMs))} |`,
      );
    }
    const at16 = rows.find((r) => r.c === 16)!;
    return {
      title: 'idem vs DBOS Transact (same PostgreSQL, same charge)',
      markdown: lines.join('\n'),
      targets: {
        'dbos-new-16': {
          value: at16.idemNew.opsPerSec / at16.dbosNew.opsPerSec,
          detail: `${fmtRate(at16.idemNew.opsPerSec)} / ${fmtRate(at16.dbosNew.opsPerSec)} charges/s; statements ${counts.idemNew.toFixed(1)} / ${counts.dbosNew.toFixed(1)}`,
          whyMissed:
            'a new charge is four commits on idem against six to eight on DBOS; when the WAL flush is the limit the ratio tends to the ratio of commits (about 2), not of statements (bench/notes.md, DBOS).',
        },
        'dbos-dup-16': {
          value: at16.idemDup.opsPerSec / at16.dbosDup.opsPerSec,
          detail:
            `${fmtRate(at16.idemDup.opsPerSec)} / ${fmtRate(at16.dbosDup.opsPerSec)} duplicates/s; statements ${counts.idemDup.toFixed(1)} / ${counts.dbosDup.toFixed(1)}; ` +
            `with the replay cache on (off by default) ${ratio(at16.idemCachedDup.opsPerSec, at16.dbosDup.opsPerSec)} × (${fmtRate(at16.idemCachedDup.opsPerSec)}/s, no statement)`,
          whyMissed:
            'a duplicate is one primary-key statement on idem against five on DBOS; when the two cores both share are the limit the ratio tends to 5. The row is idem with its defaults; the replay cache (an option) answers a duplicate with no statement: its ratio is beside.',
        },
      },
      headline: {
        'idem / DBOS, new charge, c=16': ratio(at16.idemNew.opsPerSec, at16.dbosNew.opsPerSec),
        'idem / DBOS, duplicate, c=16': ratio(at16.idemDup.opsPerSec, at16.dbosDup.opsPerSec),
        'idem (replayCache on) / DBOS, duplicate, c=16': ratio(at16.idemCachedDup.opsPerSec, at16.dbosDup.opsPerSec),
        'statements per new charge, idem / DBOS': `${counts.idemNew.toFixed(1)} / ${counts.dbosNew.toFixed(1)}`,
      },
    };
  } finally {
    if (launched) await DBOS.shutdown({ deregister: true }).catch(() => undefined);
    await Promise.all([pool.end(), systemPool.end()]);
    await admin.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => undefined);
    await admin.end();
  }
}
