/**
 * Redis failover with `PostgresPhases`, counted in EFFECTS (business rows in PostgreSQL), not
 * in claims: `DATABASE_URL=… npx tsx bench/redis-failover-effects.ts [--trials 3] [--ms 1500]
 * [--stall 300] [--only effects|cost]`.
 *
 * Effects rows: a primary and a replica on loopback ports of their own (never the shared
 * Redis), the replication link through a relay that stalls for the last `--stall` ms before the
 * primary is SIGKILLed (no `durability`). 32 request loops on new keys run what a payment
 * handler runs: claim, one phase that inserts the key's business row in PostgreSQL in the
 * phase's transaction, finish. After the kill the replica is promoted and EVERY key begun is
 * retried there until it has an answer: the acknowledged ones and the ones in flight at the
 * kill. A key with two business rows is a duplicate effect.
 *
 * Cost rows: `durability: { replicas: 1 }` after a failover. With ONE replica, the promoted
 * server has none: every claim is discarded and answered 503 until a new replica attaches
 * (measured from the promotion to the first claim that succeeds, a new replica started right
 * away). With TWO replicas, the other one is pointed at the promoted server (`REPLICAOF`) and
 * continues from its backlog.
 *
 * Prints Markdown tables (paste into docs/reliability.md). Not a test.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { PostgresPhases, RedisStore, type DurabilityOptions } from '../src/redis/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { Queryable } from '../src/postgres/client.js';
import { connect, killed, startPair } from './lib/redis-pair.js';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1] : undefined;
const TRIALS = arg('trials', 3);
const RUN_MS = arg('ms', 1500);
const STALL_MS = arg('stall', 300);
const CONCURRENCY = 32;
const LEASE_MS = 2000;
const fp = new Uint8Array(32).fill(7);
const RESPONSE = { status: 201, headers: [['content-type', 'text/plain']] as Array<[string, string]>, body: new Uint8Array([111, 107]) };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 40 });

/** One request of key `key`: claim, the business row in the phase's transaction, finish. */
async function request(engine: IdempotencyEngine<Queryable>, biz: string, key: string): Promise<'done' | 'replay' | 'busy'> {
  const begun = await engine.begin({ scope: 'fo', key, fingerprint: fp });
  if (begun.kind === 'replay') return 'replay';
  if (begun.kind !== 'execute') return 'busy';
  const { execution } = begun;
  try {
    await execution.phase('charge', async (tx) => {
      await tx.query(`INSERT INTO ${biz} (key) VALUES ($1)`, [key]);
      return key;
    });
    await execution.finish(RESPONSE);
    return 'done';
  } catch (error) {
    await execution.release().catch(() => undefined);
    throw error;
  }
}

interface EffectsTrial {
  acked: number;
  inFlight: number;
  dupAcked: number;
  dupInFlight: number;
  reclaimed: number;
}

async function effectsTrial(): Promise<EffectsTrial> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-fo-effects-'));
  const pair = await startPair(dir);
  const tag = randomUUID().slice(0, 8);
  const biz = `fo_biz_${tag}`;
  const ledgerTable = `fo_phases_${tag}`;
  await pool.query(`CREATE TABLE ${biz} (key text NOT NULL)`);
  const phases = new PostgresPhases({ client: pool, table: ledgerTable });
  await phases.migrate();
  const prefix = `fo-${tag}`;
  try {
    const client = await connect(pair.primaryPort);
    const engine = new IdempotencyEngine<Queryable>({ store: new RedisStore({ client, prefix, phases }), leaseMs: LEASE_MS });
    const begun: string[] = [];
    const acked = new Set<string>();
    let stopped = false;
    const loops = Array.from({ length: CONCURRENCY }, async () => {
      while (!stopped) {
        const key = randomUUID();
        begun.push(key);
        try {
          if ((await request(engine, biz, key)) === 'done') acked.add(key);
        } catch {
          return; // the primary is gone
        }
      }
    });
    await sleep(RUN_MS - STALL_MS);
    pair.stall();
    await sleep(STALL_MS);
    await killed(pair.primary); // mid-stream: requests in flight
    stopped = true;
    await Promise.all(loops);
    client.destroy();
    const promote = await connect(pair.replicaPort);
    await promote.sendCommand(['REPLICAOF', 'NO', 'ONE']);
    promote.destroy();
    // Every key begun is retried on the promoted replica until it has an answer.
    const retryClient = await connect(pair.replicaPort);
    const retry = new IdempotencyEngine<Queryable>({ store: new RedisStore({ client: retryClient, prefix, phases }), leaseMs: LEASE_MS });
    let reclaimed = 0;
    const queue = [...begun];
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (let key = queue.pop(); key !== undefined; key = queue.pop()) {
          for (let attempt = 0; ; attempt++) {
            const answer = await request(retry, biz, key).catch(() => 'busy' as const);
            if (answer === 'done') reclaimed++;
            if (answer !== 'busy') break;
            if (attempt > 200) throw new Error(`key ${key}: no answer after 200 attempts`);
            await sleep(100);
          }
        }
      }),
    );
    retryClient.destroy();
    const { rows } = await pool.query(`SELECT key FROM ${biz} GROUP BY key HAVING count(*) > 1`);
    const dups = rows.map((r) => String(r.key));
    const dupAcked = dups.filter((k) => acked.has(k)).length;
    return { acked: acked.size, inFlight: begun.length - acked.size, dupAcked, dupInFlight: dups.length - dupAcked, reclaimed };
  } finally {
    await pair.stop();
    await pool.query(`DROP TABLE IF EXISTS ${biz}`);
    await pool.query(`DROP TABLE IF EXISTS ${ledgerTable}`);
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * `durability: { replicas: 1 }` across a failover: ms from the promotion to the first claim
 * that succeeds, and how many claims were refused (503) meanwhile.
 */
async function costTrial(replicas: 1 | 2): Promise<{ blockedMs: number; refused: number }> {
  const dir = await mkdtemp(join(tmpdir(), 'idem-fo-cost-'));
  const pair = await startPair(dir, replicas - 1);
  const durability: DurabilityOptions = { replicas: 1, timeoutMs: 200 };
  try {
    const warm = await connect(pair.primaryPort);
    const claimOn = (store: RedisStore) => store.claim({ scope: 'fo', key: randomUUID(), fingerprint: fp, leaseMs: 60_000, retentionMs: 3_600_000 });
    await claimOn(new RedisStore({ client: warm, prefix: 'cost', durability }));
    warm.destroy();
    await killed(pair.primary);
    const client = await connect(pair.replicaPort);
    await client.sendCommand(['REPLICAOF', 'NO', 'ONE']);
    const promotedAt = performance.now();
    // What an operator (or Sentinel) does next: the other replica follows the new primary, or,
    // with none left, a new one is started.
    if (replicas === 2) {
      const other = await connect(pair.extraPorts[0]!);
      await other.sendCommand(['REPLICAOF', '127.0.0.1', String(pair.replicaPort)]);
      other.destroy();
    } else {
      await pair.spawn(['--replicaof', '127.0.0.1', String(pair.replicaPort)]);
    }
    const store = new RedisStore({ client, prefix: 'cost', durability });
    let refused = 0;
    for (;;) {
      try {
        await claimOn(store);
        break;
      } catch {
        refused++;
        if (performance.now() - promotedAt > 120_000) throw new Error('no claim succeeded within 120 s');
      }
    }
    const blockedMs = performance.now() - promotedAt;
    client.destroy();
    return { blockedMs, refused };
  } finally {
    await pair.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

const out: string[] = [];
const stamp = new Date().toISOString().slice(0, 16).replace('T', ' ');
if (only !== 'cost') {
  const trials: EffectsTrial[] = [];
  for (let i = 0; i < TRIALS; i++) {
    trials.push(await effectsTrial());
    console.error(JSON.stringify(trials.at(-1)));
  }
  const sum = (f: (t: EffectsTrial) => number) => trials.reduce((s, t) => s + f(t), 0);
  out.push(
    `Measured ${stamp} UTC with \`npx tsx bench/redis-failover-effects.ts --trials ${TRIALS} --ms ${RUN_MS} --stall ${STALL_MS}\` (${CONCURRENCY} request loops, no \`durability\`, link stalled for the last ${STALL_MS} ms, primary SIGKILLed ${RUN_MS} ms into the stream):\n`,
    '| trials | keys acknowledged | keys in flight at the kill | retries that executed (claim or takeover) | keys with a second business row: acknowledged | : in flight at the kill |',
    '|---|---|---|---|---|---|',
    `| ${TRIALS} | ${sum((t) => t.acked)} | ${sum((t) => t.inFlight)} | ${sum((t) => t.reclaimed)} | ${sum((t) => t.dupAcked)} | ${sum((t) => t.dupInFlight)} |`,
    '',
  );
}
if (only !== 'effects') {
  out.push(
    '| `durability: { replicas: 1, timeoutMs: 200 }`, after SIGKILL + promotion | trials | claims refused (503) before the first success | ms from promotion to the first claim acknowledged (median, max) |',
    '|---|---|---|---|',
  );
  for (const replicas of [1, 2] as const) {
    const runs: Array<{ blockedMs: number; refused: number }> = [];
    for (let i = 0; i < TRIALS; i++) runs.push(await costTrial(replicas));
    console.error(replicas, JSON.stringify(runs));
    const ms = runs.map((r) => r.blockedMs).sort((a, b) => a - b);
    const what =
      replicas === 1 ? 'one replica: a new replica started at the promotion' : 'two replicas: the other one re-pointed (`REPLICAOF`) at the promotion';
    out.push(`| ${what} | ${TRIALS} | ${runs.map((r) => r.refused).join(', ')} | ${Math.round(ms[Math.floor(ms.length / 2)]!)}, ${Math.round(ms.at(-1)!)} |`);
  }
}
console.log(out.join('\n'));
await pool.end();
process.exit(0);
