/**
 * `idem gateway` in front of a bare upstream (issue 41), over HTTP with autocannon, each server
 * in a process of its own (bench/lib/gateway-server.ts), in alternating rounds of one run:
 *
 * direct:  the bare upstream (201, a 1 KB JSON body), no proxy at all;
 * proxy:   a plain reverse proxy on undici in front of it: the floor any proxy pays;
 * gateway: `createGateway` on a PostgresStore in front of it, a new key per request (every
 *          request is claimed, forwarded and stored) and a finished key per request (replays:
 *          answered from the store, the upstream not called).
 *
 * Ratios: gateway replays against direct (a replay needs no upstream, so it may beat it), new
 * requests against direct and against the proxy floor, and the latency each adds.
 */
import { randomUUID } from 'node:crypto';
import type { BenchConfig } from './lib/config.js';
import type { Section } from './lib/fixtures.js';
import { cannon, cycle, type HttpStats, seedKeys, startServer } from './lib/http-load.js';
import { fmtMs, fmtNoise, fmtRate, interleave, ratio, type Sampled } from './lib/measure.js';

const SCRIPT = 'bench/lib/gateway-server.ts';

export async function gatewaySection(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const upstream = await startServer('upstream', [], [], SCRIPT);
  const proxy = await startServer('proxy', [upstream.url], [], SCRIPT);
  const gateway = await startServer('gateway', [upstream.url], [], SCRIPT);
  const headline: Record<string, string> = {};
  let table = '';
  try {
    const path = '/v1/charges';
    const seeded = await seedKeys(gateway.url + path, 'gw', cfg.seedKeys);
    const c = cfg.httpConnections;
    const run = (url: string, key?: () => string) => async (): Promise<HttpStats> => {
      const stats = await cannon(url + path, c, cfg.httpS, key);
      if (stats.non2xx > 0 || stats.errors > 0) throw new Error(`${url}: ${stats.non2xx} non-2xx answers, ${stats.errors} errors`);
      return stats;
    };
    if (cfg.warmupMs > 0) {
      for (const url of [upstream.url, proxy.url]) await cannon(url + path, c, 1);
      await cannon(gateway.url + path, c, 1, () => randomUUID());
    }
    log(`  gateway c=${c}: direct, proxy, gateway new, gateway replay`);
    const r = await interleave(
      {
        direct: run(upstream.url),
        proxy: run(proxy.url),
        fresh: run(gateway.url, () => randomUUID()),
        replay: run(gateway.url, cycle(seeded)),
      },
      cfg.httpRounds,
    );
    const line = (what: string, s: Sampled, against: string) =>
      `| ${what} | ${fmtRate(s.opsPerSec)} | ${against} | ${fmtMs(s.p50Ms)} / ${fmtMs(s.p99Ms)} | +${fmtMs(s.p50Ms - r.direct.p50Ms)} / +${fmtMs(s.p99Ms - r.direct.p99Ms)} | ${fmtNoise(s.noise)} |`;
    table = [
      '| side | requests/s | ratio | p50 / p99 ms | added p50 / p99 ms vs direct | noise |',
      '|---|---:|---:|---:|---:|---:|',
      `| direct (bare upstream) | ${fmtRate(r.direct.opsPerSec)} | 1.00 | ${fmtMs(r.direct.p50Ms)} / ${fmtMs(r.direct.p99Ms)} | | ${fmtNoise(r.direct.noise)} |`,
      line('plain undici proxy (the floor)', r.proxy, `${ratio(r.proxy.opsPerSec, r.direct.opsPerSec)} of direct`),
      line(
        'gateway, new key',
        r.fresh,
        `${ratio(r.fresh.opsPerSec, r.direct.opsPerSec)} of direct, **${ratio(r.fresh.opsPerSec, r.proxy.opsPerSec)} of the proxy**`,
      ),
      line('gateway, replay', r.replay, `**${ratio(r.replay.opsPerSec, r.direct.opsPerSec)} of direct**`),
    ].join('\n');
    headline[`gateway replay / direct upstream, c=${c}`] = ratio(r.replay.opsPerSec, r.direct.opsPerSec);
    headline[`gateway new key / plain proxy, c=${c}`] = ratio(r.fresh.opsPerSec, r.proxy.opsPerSec);
    log(
      `  direct ${Math.round(r.direct.opsPerSec)}/s, proxy ${Math.round(r.proxy.opsPerSec)}/s, gateway new ${Math.round(r.fresh.opsPerSec)}/s, replay ${Math.round(r.replay.opsPerSec)}/s`,
    );
  } finally {
    await gateway.stop();
    await proxy.stop();
    await upstream.stop();
  }
  return {
    title: 'idem gateway in front of a bare upstream',
    markdown: [
      `autocannon, ${cfg.httpConnections} connections, POST with a small JSON body; the upstream answers 201 with 1 KB. ` +
        'The gateway stores keys in PostgreSQL (`PostgresStore`) and forwards with undici; the plain proxy forwards with undici and stores nothing. ' +
        `${cfg.httpRounds} alternating rounds of ${cfg.httpS} s per side; each server is a process of its own on this machine.`,
      '',
      table,
    ].join('\n'),
    headline,
  };
}
