/**
 * (4) Peers side by side, on one Express server, the same no-op handler, the same Redis:
 * express-idempotency (memory, Redis), @node-idempotency/core (memory, Redis), Powertools
 * for AWS Lambda idempotency (Redis, makeIdempotent), and idem (PostgreSQL store). Each one's
 * correctness is measured in the same run: K concurrent duplicates of one fresh key, and how
 * many times the handler ran (correct = exactly once, in every trial).
 */
import { randomUUID } from 'node:crypto';
import { createClient } from '@redis/client';
import pg from 'pg';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { dropTable, type Section } from './lib/fixtures.js';
import { cannon, cycle, duplicates, seedKeys, startServer } from './lib/http-load.js';
import { fmtMs, fmtNoise, fmtRate, interleave, ratio, type Sampled } from './lib/measure.js';

const PEERS = [
  ['/idem', 'idem (PostgreSQL store)'],
  ['/idem-cached', 'idem (PostgreSQL store, replayCache on)'],
  ['/idem-redis', 'idem (Redis store, idem/redis)'],
  ['/xi-memory', 'express-idempotency 1.0.6, in memory'],
  ['/xi-redis', 'express-idempotency 1.0.6 + express-idempotency-redis-adapter 1.0.8'],
  ['/ni-memory', '@node-idempotency/core 1.0.11, memory adapter'],
  ['/ni-redis', '@node-idempotency/core 1.0.11, Redis adapter'],
  ['/pt-redis', '@aws-lambda-powertools/idempotency 2.35.0, makeIdempotent + CachePersistenceLayer (Redis)'],
] as const;

export async function peers(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const redis = createClient({ url: cfg.redisUrl });
  try {
    await redis.connect();
    await redis.ping();
  } catch (error) {
    return {
      title: 'Peers: skipped',
      markdown: `Redis at ${cfg.redisUrl} is not reachable (${(error as Error).message}); start it with \`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no\`.`,
    };
  }
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const table = uniqueTable('peers');
  // Every Redis key this run writes contains the prefix, so the cleanup deletes only ours.
  const prefix = `idembench${process.pid}x${Math.floor(Math.random() * 1e6)}`;
  const server = await startServer('peers', [cfg.databaseUrl, table, cfg.redisUrl, prefix]);
  const rows: Array<{ path: string; label: string; fresh?: Sampled; replay?: Sampled; runs: number[]; statuses: Set<number>; error?: string }> = [];
  try {
    const c = cfg.httpConnections;
    const s = cfg.httpS;
    // Warm the whole server (JIT, connections) before the first row, so the rows measured
    // first (idem's) do not pay the fresh process's warm-up alone.
    for (const [path] of PEERS)
      await cannon(server.url + path, c, Math.max(0.3, cfg.warmupMs / 4000), () => `${prefix}-${randomUUID()}`).catch(() => undefined);
    for (const [path, label] of PEERS) {
      const row: (typeof rows)[number] = { path, label, runs: [], statuses: new Set() };
      rows.push(row);
      try {
        log(`  ${label}`);
        for (let t = 0; t < cfg.duplicateTrials; t++) {
          const d = await duplicates(server.url, path, cfg.duplicates, prefix);
          row.runs.push(d.runs);
          for (const st of d.statuses) row.statuses.add(st);
        }
        const url = server.url + path;
        const replayKeys = await seedKeys(url, prefix, cfg.seedKeys);
        if (cfg.warmupMs > 0) await cannon(url, c, cfg.warmupMs / 1000, () => `${prefix}-${randomUUID()}`); // warm up
        const r = await interleave(
          {
            fresh: () => cannon(url, c, s, () => `${prefix}-${randomUUID()}`),
            replay: () => cannon(url, c, s, cycle(replayKeys)),
          },
          cfg.httpRounds,
        );
        row.fresh = r.fresh;
        row.replay = r.replay;
      } catch (error) {
        row.error = (error as Error).message.split('\n')[0];
        log(`  ${label} failed: ${row.error}`);
      }
    }
  } finally {
    await server.stop();
    await dropTable(admin, table);
    await admin.end();
    for await (const keys of redis.scanIterator({ MATCH: `*${prefix}*`, COUNT: 1000 })) {
      if (keys.length > 0) await redis.del(keys);
    }
    await redis.quit();
  }
  const idem = rows[0]!;
  const lines = [
    `One Express 5 server in its own process; every route runs the same no-op handler (201, small JSON) behind one library. ` +
      `Load: autocannon, ${cfg.httpConnections} connections, ${cfg.httpS} s per run, new keys and replays interleaved over ${cfg.httpRounds} rounds; *noise* is the spread of one side's rounds, (max − min) / median. ` +
      `Correctness: ${cfg.duplicateTrials} trials of ${cfg.duplicates} concurrent duplicates of one fresh key; *handler runs* lists how many times the handler ran in each trial (correct: 1 every time).`,
    '',
    '| library | new keys ops/s | p50 / p99 ms | replays ops/s | p50 / p99 ms | noise new / replay | replay vs idem | handler runs per trial | correct | statuses seen |',
    '|---|---:|---:|---:|---:|---:|---:|---|---|---|',
  ];
  for (const r of rows) {
    if (r.error && !r.fresh) {
      lines.push(
        `| ${r.label} | failed: ${r.error} | | | | | | ${r.runs.join(', ')} | ${r.runs.length && r.runs.every((n) => n === 1) ? 'yes' : 'no'} | ${[...r.statuses].join(', ')} |`,
      );
      continue;
    }
    const correct = r.runs.every((n) => n === 1);
    lines.push(
      `| ${r.label} | ${fmtRate(r.fresh!.opsPerSec)} | ${fmtMs(r.fresh!.p50Ms)} / ${fmtMs(r.fresh!.p99Ms)} | ${fmtRate(r.replay!.opsPerSec)} | ${fmtMs(r.replay!.p50Ms)} / ${fmtMs(r.replay!.p99Ms)} | ${fmtNoise(r.fresh!.noise)} / ${fmtNoise(r.replay!.noise)} | ` +
        `${idem.replay ? ratio(r.replay!.opsPerSec, idem.replay.opsPerSec) : 'n/a'} | ${r.runs.join(', ')} | ${correct ? '**yes**' : '**no**'} | ${[...r.statuses].sort().join(', ')} |`,
    );
  }
  lines.push(
    '',
    'Reading the table: a library that is faster but ran the handler more than once for one key does not do the job (a retried payment charged twice). ' +
      'The in-memory stores keep keys in one process only: they cannot deduplicate across app instances and lose every key on restart. ' +
      "idem's new keys pay two durable PostgreSQL commits (claim, then response); the Redis peers were measured against Redis with persistence off.",
  );
  // The target: idem's replays on PostgreSQL with the replay cache on (the `/idem-cached`
  // route, when the build has the cache) against the fastest peer that was correct here.
  const cached = rows.find((r) => r.path === '/idem-cached') ?? idem;
  const correctPeers = rows.filter((r) => !r.path.startsWith('/idem') && r.replay && r.runs.length > 0 && r.runs.every((n) => n === 1));
  const fastest = correctPeers.sort((a, b) => b.replay!.opsPerSec - a.replay!.opsPerSec)[0];
  const targets: NonNullable<Section['targets']> = {};
  if (cached.replay && fastest) {
    targets['peers-replay'] = {
      value: cached.replay.opsPerSec / fastest.replay!.opsPerSec,
      detail: `${cached.label} ${fmtRate(cached.replay.opsPerSec)} / ${fastest.label} ${fmtRate(fastest.replay!.opsPerSec)} replays/s, noise ${fmtNoise(cached.replay.noise)} / ${fmtNoise(fastest.replay!.noise)}`,
      whyMissed:
        cached === idem
          ? 'measured without the replay cache (not in this build): every replay on idem is a PostgreSQL round trip, against peers answering from memory or from Redis without persistence.'
          : "idem's replays with the cache still parse the key, fingerprint the body (canonical JSON + SHA-256) and build the replayed Response per request (bench/out/profile/http.md), work the peers do not do.",
    };
  }
  // idem's Redis store against the fastest correct peer that keeps its keys in Redis, for new
  // keys and for replays (each side's fastest may be a different peer).
  const idemRedis = rows.find((r) => r.path === '/idem-redis');
  const redisPeers = correctPeers.filter((r) => r.path.endsWith('-redis') && r.fresh && r.replay);
  if (idemRedis?.fresh && idemRedis.replay && redisPeers.length > 0) {
    for (const kind of ['fresh', 'replay'] as const) {
      const best = [...redisPeers].sort((a, b) => b[kind]!.opsPerSec - a[kind]!.opsPerSec)[0]!;
      const what = kind === 'fresh' ? 'new keys' : 'replays';
      targets[kind === 'fresh' ? 'peers-redis-new' : 'peers-redis-replay'] = {
        value: idemRedis[kind]!.opsPerSec / best[kind]!.opsPerSec,
        detail: `${idemRedis.label} ${fmtRate(idemRedis[kind]!.opsPerSec)} / ${best.label} ${fmtRate(best[kind]!.opsPerSec)} ${what}/s, noise ${fmtNoise(idemRedis[kind]!.noise)} / ${fmtNoise(best[kind]!.noise)}`,
        whyMissed:
          kind === 'fresh'
            ? "most of idem's cost per new key here is its HTTP path (the Express capture of the response, the request's headers as web Headers, the engine), about as much with the in-memory store as with Redis; " +
              'the Redis store\'s claim and fenced finish scripts take ~60 µs of Redis server time per new key where the peer\'s two SETs take ~5-10 µs, on the same two cores (bench/notes.md, "Redis store", "New keys on Express + Redis").'
            : "most of idem's cost per request here is its HTTP path (the fingerprint, the engine, the captured and replayed response), the same with the in-memory store; " +
              'the Redis store adds a claim and a fenced finish script per new key where the peers send two plain commands (bench/notes.md, "Redis store").',
      };
    }
  }
  return {
    title: 'Peers side by side (same run, same Redis, no-op handler)',
    markdown: lines.join('\n'),
    targets,
  };
}
