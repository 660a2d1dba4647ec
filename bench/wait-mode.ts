/**
 * Wait mode (protocol.md K17, issue 28), two figures per store, printed as Markdown:
 *
 * 1. Losers' wait: rounds of 32 concurrent duplicates of one key (a 20 ms handler); for each of
 *    the 31 losers, the time from the winner's `finish()` call to the loser's replay.
 * 2. The cost when no one waits: engine.begin() + finish() on new keys, 16 loops, in alternating
 *    rounds (A B B A …) against the same store with its notification taken out (Redis: the
 *    scripts without `SPUBLISH`, through the same client wrapper; memory: no hub check).
 *
 * A section of `npm run bench` (`--only=wait`, with PostgreSQL and Redis from the suite's
 * config), with two targets: the cost when no one waits ≤ 2 % (ratio ≥ 0.98) on memory and Redis.
 * Alone: `DATABASE_URL=… REDIS_URL=… npx tsx bench/wait-mode.ts` prints the section (each store
 * whose variable is unset is left out; memory and PGlite always run).
 */
import { createHash } from 'node:crypto';
import os from 'node:os';
import { pathToFileURL } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { createClient } from '@redis/client';
import { Redis } from 'ioredis';
import pg from 'pg';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { MemoryStore } from '../src/memory/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { RedisStore } from '../src/redis/index.js';
import { SCRIPTS } from '../src/redis/scripts.js';
import type { IdempotencyStore } from '../src/store/types.js';
import { startOwnRedis } from '../test/helpers/redis-server.js';
import type { BenchConfig } from './lib/config.js';
import type { Section, TargetValue } from './lib/fixtures.js';
import { closedLoop, fmtMs, fmtNoise, fmtRate, interleave } from './lib/measure.js';

const FP = createHash('sha256').update('bench').digest();
const RESPONSE = { status: 201, headers: [] as Array<[string, string]>, body: new TextEncoder().encode('{"id":"ch_1"}') };
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pct = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))]!;
let seq = 0;
const fresh = () => `k${process.pid}-${seq++}-${Math.random().toString(36).slice(2)}`;

async function losersWait(store: IdempotencyStore, rounds: number): Promise<number[]> {
  const eng = new IdempotencyEngine({ store, inProgress: { wait: 10_000 }, leaseMs: 30_000 });
  const waits: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const key = fresh();
    let finishAt = 0;
    const ats = await Promise.all(
      Array.from({ length: 32 }, async () => {
        const begun = await eng.begin({ scope: 's', key, fingerprint: FP });
        if (begun.kind === 'execute') {
          await sleep(20);
          finishAt = performance.now();
          await begun.execution.finish(async () => RESPONSE);
          return undefined;
        }
        if (begun.kind !== 'replay') throw new Error(`a loser got ${begun.kind}`);
        return performance.now();
      }),
    );
    for (const at of ats) if (at !== undefined) waits.push(at - finishAt);
  }
  return waits;
}

function newRequest(store: IdempotencyStore) {
  const eng = new IdempotencyEngine({ store });
  return async () => {
    const begun = await eng.begin({ scope: 's', key: fresh(), fingerprint: FP });
    if (begun.kind === 'execute') await begun.execution.finish(async () => RESPONSE);
  };
}

/** A node-redis-shaped client over `send` whose scripts run with or without their `SPUBLISH` (same wrapper both ways). */
function scriptsClient(send: (args: string[]) => Promise<unknown>, publish: boolean) {
  const sha = (text: string) => createHash('sha1').update(text).digest('hex');
  const swap = new Map<string, string>();
  const texts = new Map<string, string>();
  for (const text of Object.values(SCRIPTS)) {
    const used = publish ? text : text.replace("redis.pcall('SPUBLISH', h, '1')", '');
    swap.set(sha(text), sha(used));
    texts.set(text, used);
  }
  return {
    sendCommand(args: string[]) {
      if (args[0] === 'EVALSHA') return send(['EVALSHA', swap.get(args[1]!) ?? args[1]!, ...args.slice(2)]);
      if (args[0] === 'EVAL') return send(['EVAL', texts.get(args[1]!) ?? args[1]!, ...args.slice(2)]);
      return send(args);
    },
  };
}

interface Urls {
  databaseUrl?: string;
  redisUrl?: string;
  rounds: number;
  roundMs: number;
  log: (line: string) => void;
}

async function measure({ databaseUrl, redisUrl, rounds, roundMs, log }: Urls): Promise<{ markdown: string; targets: Record<string, TargetValue> }> {
  const out: string[] = [];
  const targets: Record<string, TargetValue> = {};
  const load = os
    .loadavg()
    .map((n) => n.toFixed(1))
    .join(' / ');
  out.push(`Machine: ${os.cpus().length} cores, load ${load} (1/5/15 min) at the start; ${rounds} rounds per side.`, '');
  const cleanups: Array<() => Promise<unknown>> = [];
  const stores: Array<[string, IdempotencyStore]> = [['MemoryStore', new MemoryStore()]];
  const lite = new PGlite();
  cleanups.push(() => lite.close());
  const liteStore = new PostgresStore({ client: lite, table: 'idem_bench_wait', notify: true });
  await liteStore.migrate();
  stores.push(['PGlite (notify: true)', liteStore]);
  let pool: pg.Pool | undefined;
  const table = `idem_bench_wait_${process.pid}`;
  if (databaseUrl) {
    pool = new pg.Pool({ connectionString: databaseUrl, max: 20 });
    const p = pool;
    for (const [name, notify] of [
      ['PostgreSQL (notify: true)', true],
      ["PostgreSQL (notify: 'after-commit', Citus's way)", 'after-commit'],
    ] as const) {
      const s = new PostgresStore({ client: p, table: `${table}_${notify === true ? 'n' : 'a'}`, notify });
      await s.migrate();
      stores.push([name, s]);
    }
    cleanups.push(async () => {
      for (const t of [`${table}_n`, `${table}_a`]) {
        await p.query(`DROP TABLE IF EXISTS "${t}" CASCADE`);
        await p.query(`DROP SEQUENCE IF EXISTS "${t}_lock_version_seq"`);
      }
      await p.end();
    });
  }
  if (redisUrl) {
    const nr = createClient({ url: redisUrl });
    await nr.connect();
    const io = new Redis(redisUrl);
    cleanups.push(async () => {
      // Only this run's keys (its own prefix).
      let cursor = '0';
      do {
        const [next, keys] = (await nr.sendCommand(['SCAN', cursor, 'MATCH', `idem-bench-${process.pid}*`, 'COUNT', '1000'])) as [string, string[]];
        cursor = String(next);
        if (keys.length > 0) await nr.sendCommand(['DEL', ...keys]);
      } while (cursor !== '0');
      nr.destroy();
      io.disconnect();
    });
    stores.push(['RedisStore, node-redis', new RedisStore({ client: nr, prefix: `idem-bench-${process.pid}` })]);
    stores.push(['RedisStore, ioredis', new RedisStore({ client: io, prefix: `idem-bench-${process.pid}` })]);
  }

  out.push("Losers' wait, from the winner's finish() call to each loser's replay (32 duplicates per round, 31 losers):", '');
  out.push('| Store | losers | p50 ms | p99 ms |', '|---|---:|---:|---:|');
  for (const [name, store] of stores) {
    await losersWait(store, 2); // warm-up: connections, subscriber, prepared statements
    const waits = await losersWait(store, rounds * 2);
    out.push(`| ${name} | ${waits.length} | ${fmtMs(pct(waits, 0.5))} | ${fmtMs(pct(waits, 0.99))} |`);
    log(`  wait mode, ${name}: done`);
  }

  out.push('', 'No one waiting (the cost of the notification itself, alternating rounds of the same run):', '');
  // Memory: begin() + finish() on new keys, one loop (CPU-bound: a loop per side is the least noisy).
  const mem = new MemoryStore();
  const memOff = new MemoryStore();
  (memOff as unknown as { changed: () => void }).changed = () => undefined;
  const oneLoop = (store: IdempotencyStore) => () => closedLoop(newRequest(store), 1, roundMs);
  const m = await interleave({ with: oneLoop(mem), without: oneLoop(memOff) }, rounds * 2);
  const paired = m.with.rounds.map((w, i) => w / m.without.rounds[i]!);
  targets['wait-idle-memory'] = {
    value: pct(paired, 0.5),
    detail: `${fmtRate(m.with.opsPerSec)} / ${fmtRate(m.without.opsPerSec)} ops/s with / without the hub check, median of paired rounds`,
  };
  out.push(
    `- MemoryStore, begin() + finish() on new keys, one loop: ${fmtRate(m.with.opsPerSec)} ops/s with the hub check, ${fmtRate(m.without.opsPerSec)} without; median of the paired rounds' ratios **${pct(paired, 0.5).toFixed(3)}** (noise ${fmtNoise(m.with.noise)} / ${fmtNoise(m.without.noise)}).`,
  );
  // Redis: server time per call (INFO commandstats) on a redis-server of this run's own, so no
  // other client's commands count, for the finish script with and without its SPUBLISH.
  const own = await startOwnRedis();
  const r = createClient({ url: `redis://127.0.0.1:${own.port}` });
  r.on('error', () => undefined);
  await r.connect();
  cleanups.push(async () => {
    r.destroy();
    await own.stop();
  });
  const serverUs = async (publish: boolean) => {
    const store = new RedisStore({ client: scriptsClient((args) => r.sendCommand(args), publish), prefix: 'b' });
    const eng = new IdempotencyEngine({ store });
    await r.sendCommand(['CONFIG', 'RESETSTAT']);
    for (let i = 0; i < 2000; i++) {
      const begun = await eng.begin({ scope: 's', key: fresh(), fingerprint: FP });
      if (begun.kind === 'execute') await begun.execution.finish(async () => RESPONSE);
    }
    const stats = String(await r.sendCommand(['INFO', 'commandstats']));
    const usec = (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+),usec=(\\d+)`).exec(stats)?.[2] ?? 0);
    return (usec('evalsha') + usec('eval')) / 2000;
  };
  const withUs: number[] = [];
  const withoutUs: number[] = [];
  const redisPaired: number[] = [];
  await serverUs(true);
  await serverUs(false);
  for (let i = 0; i < rounds * 2; i++) {
    // A B B A …: neither side always runs first (the server's key count grows run by run).
    const first = i % 2 === 0;
    const a = await serverUs(first);
    const b = await serverUs(!first);
    const [w, wo] = first ? [a, b] : [b, a];
    withUs.push(w);
    withoutUs.push(wo);
    redisPaired.push(wo / w);
  }
  const w = pct(withUs, 0.5);
  const wo = pct(withoutUs, 0.5);
  const ratio = pct(redisPaired, 0.5);
  const spread = `${Math.min(...redisPaired).toFixed(2)}–${Math.max(...redisPaired).toFixed(2)}`;
  // The notification's own server CPU, without the rest of a request's noise: one script runs
  // the command 20,000 times in a loop (INFO cpu, main thread), with no subscriber on the channel.
  const cpuUs = async () => {
    const info = String(await r.sendCommand(['INFO', 'cpu']));
    const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
    return (field('used_cpu_user_main_thread') + field('used_cpu_sys_main_thread')) * 1e6;
  };
  const loops = { SPUBLISH: "redis.pcall('SPUBLISH', h, '1')", 'PUBSUB SHARDNUMSUB': "redis.pcall('PUBSUB', 'SHARDNUMSUB', h)", nothing: '' };
  const perCall: Record<string, number[]> = Object.fromEntries(Object.keys(loops).map((name) => [name, []]));
  for (let i = 0; i < rounds * 2; i++) {
    for (const [name, call] of Object.entries(loops)) {
      const before = await cpuUs();
      await r.sendCommand(['EVAL', `local h = KEYS[1] for i = 1, 20000 do ${call} end return 1`, '1', 'b:{loop}']);
      perCall[name]!.push(((await cpuUs()) - before) / 20000);
    }
  }
  const callUs = (name: string) => pct(perCall[name]!, 0.5) - pct(perCall.nothing!, 0.5);
  out.push(
    `- RedisStore (scripts' server time per request, claim + finish, from INFO commandstats on an own redis-server): ${w.toFixed(2)} µs with the SPUBLISH, ${wo.toFixed(2)} µs without (medians of ${rounds * 2} alternating rounds of 2000 requests, A B B A); median of the paired rounds' ratios without / with **${ratio.toFixed(3)}** (rounds ${spread}).`,
    `- The notification's own server CPU per call, from a script (no subscriber; a loop of 20,000 in one script, INFO cpu, median of ${rounds * 2}): SPUBLISH ${callUs('SPUBLISH').toFixed(2)} µs, PUBSUB SHARDNUMSUB ${callUs('PUBSUB SHARDNUMSUB').toFixed(2)} µs (the check that would let a script publish only to a subscribed channel).`,
  );
  targets['wait-idle-redis'] = {
    value: ratio,
    detail: `scripts' server time ${w.toFixed(1)} / ${wo.toFixed(1)} µs per request with / without the SPUBLISH, median of paired rounds (${spread})`,
    whyMissed:
      `the notification is one SPUBLISH in every finish script, sent whether or not anyone waits: ${callUs('SPUBLISH').toFixed(2)} µs of server CPU per call measured alone, ` +
      `against the ${(w - wo).toFixed(1)} µs between the medians here (wall-clock server time, whose rounds spread ${spread} on this shared machine). ` +
      (callUs('PUBSUB SHARDNUMSUB') >= callUs('SPUBLISH')
        ? `No check inside the script is cheaper than the SPUBLISH it would save: PUBSUB SHARDNUMSUB costs ${callUs('PUBSUB SHARDNUMSUB').toFixed(2)} µs per call (its reply becomes a Lua table).`
        : `PUBSUB SHARDNUMSUB measured ${callUs('PUBSUB SHARDNUMSUB').toFixed(2)} µs per call in this run, below the SPUBLISH; a guard on it was measured at about 2.5 × the SPUBLISH earlier and misses a replica's subscribers (bench/notes.md).`),
  };
  for (const c of cleanups) await c();
  return { markdown: out.join('\n'), targets };
}

/** The `wait` section of `npm run bench`. */
export async function waitMode(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const { markdown, targets } = await measure({
    databaseUrl: cfg.databaseUrl,
    redisUrl: cfg.redisUrl,
    rounds: cfg.quick ? 3 : 6,
    roundMs: cfg.quick ? 400 : 1000,
    log,
  });
  return { title: "Wait mode: losers' wait per store, and the cost when no one waits (issue 28)", markdown, targets };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { markdown } = await measure({
    databaseUrl: process.env.DATABASE_URL,
    redisUrl: process.env.REDIS_URL,
    rounds: Number(process.env.ROUNDS ?? 6),
    roundMs: Number(process.env.ROUND_MS ?? 1000),
    log: (line) => console.error(line),
  });
  console.log(markdown);
}
