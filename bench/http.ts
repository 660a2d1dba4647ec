/**
 * (3) HTTP level: the same no-op handler bare and behind idem (PostgreSQL store), on Hono and
 * Express, new keys and replays, load from autocannon, rounds interleaved.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { BenchConfig } from './lib/config.js';
import { uniqueTable } from './lib/config.js';
import { dropTable, type Section } from './lib/fixtures.js';
import { cannon, cycle, seedKeys, startServer } from './lib/http-load.js';
import { fmtMs, fmtNoise, fmtRate, interleave, ratio } from './lib/measure.js';

export async function httpLevel(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const admin = new pg.Pool({ connectionString: cfg.databaseUrl, max: 1 });
  const lines = [
    `Load: autocannon, ${cfg.httpConnections} connections, ${cfg.httpS} s per run, ${cfg.httpRounds} interleaved rounds; the server runs in its own process.`,
    '',
    '| framework | case | ops/s | p50 / p99 ms | / bare | noise |',
    '|---|---|---:|---:|---:|---:|',
  ];
  const headline: Record<string, string> = {};
  const targets: NonNullable<Section['targets']> = {};
  try {
    for (const framework of ['hono', 'express']) {
      const table = uniqueTable(`http_${framework}`);
      const server = await startServer(framework, [cfg.databaseUrl, table, cfg.redisUrl, table]);
      try {
        const replayKeys = await seedKeys(`${server.url}/idem`, 'r', cfg.seedKeys);
        const memoryKeys = await seedKeys(`${server.url}/idem-memory`, 'm', cfg.seedKeys);
        const cachedKeys = await seedKeys(`${server.url}/idem-cached`, 'c', cfg.seedKeys);
        const c = cfg.httpConnections;
        const s = cfg.httpS;
        // Warm up every route (JIT, connections) so that no case pays the fresh process's warm-up alone.
        const warm = Math.max(0.3, cfg.warmupMs / 1000);
        await cannon(`${server.url}/bare`, c, warm);
        for (const [route, keys] of [
          ['/idem', replayKeys],
          ['/idem-cached', cachedKeys],
          ['/idem-memory', memoryKeys],
        ] as const) {
          await cannon(`${server.url}${route}`, c, warm, () => randomUUID());
          await cannon(`${server.url}${route}`, c, warm, cycle(keys));
        }
        log(`  ${framework}`);
        const r = await interleave(
          {
            bare: () => cannon(`${server.url}/bare`, c, s),
            idemNew: () => cannon(`${server.url}/idem`, c, s, () => randomUUID()),
            idemReplay: () => cannon(`${server.url}/idem`, c, s, cycle(replayKeys)),
            cachedReplay: () => cannon(`${server.url}/idem-cached`, c, s, cycle(cachedKeys)),
            memoryReplay: () => cannon(`${server.url}/idem-memory`, c, s, cycle(memoryKeys)),
          },
          cfg.httpRounds,
        );
        for (const [label, st] of [
          ['bare handler', r.bare],
          ['behind idem, new keys', r.idemNew],
          ['behind idem, replays', r.idemReplay],
          ['behind idem with replayCache, replays', r.cachedReplay],
          ['behind idem on MemoryStore, replays (no round trip)', r.memoryReplay],
        ] as const) {
          lines.push(
            `| ${framework} | ${label} | ${fmtRate(st.opsPerSec)} | ${fmtMs(st.p50Ms)} / ${fmtMs(st.p99Ms)} | ${ratio(st.opsPerSec, r.bare.opsPerSec)} | ${fmtNoise(st.noise)} |`,
          );
        }
        headline[`HTTP ${framework}: replay / bare handler`] = ratio(r.idemReplay.opsPerSec, r.bare.opsPerSec);
        if (framework === 'hono') {
          targets['http-hono-replay'] = {
            value: r.idemReplay.opsPerSec / r.bare.opsPerSec,
            detail: `${fmtRate(r.idemReplay.opsPerSec)} / ${fmtRate(r.bare.opsPerSec)} req/s, no replay cache; on MemoryStore (no round trip) ${ratio(r.memoryReplay.opsPerSec, r.bare.opsPerSec)} × bare`,
            whyMissed:
              'the replay on PostgreSQL still makes one database round trip per request: in the CPU profile (bench/out/profile/http.md) the pg driver and its socket writes take 30-40 % of the server process, ' +
              "idem's own code (key, scope, fingerprint, engine, the replayed Response) 13-15 %; PostgreSQL's backends share the same two cores. The same route on the in-process MemoryStore, the floor a replay cache reaches, is the row beside it.",
          };
          targets['http-hono-replay-cached'] = {
            value: r.cachedReplay.opsPerSec / r.bare.opsPerSec,
            detail: `${fmtRate(r.cachedReplay.opsPerSec)} / ${fmtRate(r.bare.opsPerSec)} req/s, PostgreSQL store with replayCache`,
            whyMissed:
              "with the cache a replay makes no round trip; what is left (bench/out/profile/http.md, bench/notes.md) is idem's own HTTP path, about 15 µs of server CPU per replay (key, scope, the fingerprint memo, the cache lookup, the replayed Response, its headers built once per cached record), and reading the body through @hono/node-server (stream listeners, an ArrayBuffer copy), against a bare handler that does none of it; the socket write is a third of the server's CPU in both.",
          };
        }
      } finally {
        await server.stop();
        await dropTable(admin, table);
      }
    }
  } finally {
    await admin.end();
  }
  lines.push(
    '',
    "*On MemoryStore*: the same middleware on the in-process store, so no database round trip: the cost of idem's own HTTP path, and what a replay answered from a cache in front of the database can reach.",
    '',
    "A new key costs two commits (the claim, then the response), so behind idem a new request is bound by the database's commit rate, not by the framework; compare it with the library-level raw new request above, not with the bare handler.",
  );
  return { title: 'HTTP level: bare handler vs behind idem', markdown: lines.join('\n'), headline, targets };
}
