/**
 * idem/redis through the engine vs the same work as raw commands through the same client
 * (node-redis, one connection), interleaved in rounds. A section of `npm run bench`
 * (`--only=redis`, targets `redis-new-16` / `redis-replay-16`), and runnable alone:
 *
 *   npx tsx bench/redis-store.ts [--seconds 2] [--rounds 3]
 *
 * new request: raw = `SET key NX` (the claim) + `HSET` of the response (1 KB body);
 *              idem = engine.begin() + execution.finish() (claim script + finish script; the
 *              replay fast path's `HGETALL` is skipped while new keys dominate, protocol.md K28).
 * replay:      raw = `HGETALL` of the stored response;
 *              idem = engine.begin() on a finished key (the replay fast path's `HGETALL`).
 */
import { randomUUID } from 'node:crypto';
import { createClient } from '@redis/client';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { RedisStore } from '../src/redis/index.js';
import type { BenchConfig } from './lib/config.js';
import type { Section } from './lib/fixtures.js';
import { closedLoop, fmtNoise, fmtRate, interleave, ratio, type Sampled } from './lib/measure.js';

/** The measured sides at each concurrency. */
type Measured = Array<{ c: number; r: Record<'new: idem' | 'new: raw' | 'replay: idem' | 'replay: raw', Sampled> }>;

async function measure(redisUrl: string, concurrencies: number[], caseMs: number, rounds: number, log: (line: string) => void): Promise<Measured> {
  const client = createClient({ url: redisUrl });
  await client.connect();
  const prefix = `idem-bench-${randomUUID().slice(0, 8)}`;
  try {
    const store = new RedisStore({ client, prefix });
    const engine = new IdempotencyEngine({ store, heartbeatMs: 0 });
    const body = new Uint8Array(1024).fill(120);
    const bodyB64 = Buffer.from(body).toString('base64');
    const fp = new Uint8Array(32).fill(7);
    const response = { status: 201, headers: [['content-type', 'application/json']] as Array<[string, string]>, body };

    // Finished keys to replay, for both sides.
    const REPLAY_KEYS = 2000;
    for (let i = 0; i < REPLAY_KEYS; i++) {
      const begun = await engine.begin({ scope: 'bench', key: `r${i}`, fingerprint: fp });
      if (begun.kind === 'execute') await begun.execution.finish(response);
      await client.sendCommand(['HSET', `${prefix}:raw:r${i}`, 'st', 'done', 'rs', '201', 'rh', '[["content-type","application/json"]]', 'rb', bodyB64]);
    }

    const cases = (c: number) => ({
      'new: idem': () =>
        closedLoop(
          async () => {
            const begun = await engine.begin({ scope: 'bench', key: randomUUID(), fingerprint: fp });
            if (begun.kind !== 'execute') throw new Error(`unexpected ${begun.kind}`);
            await begun.execution.finish(response);
          },
          c,
          caseMs,
        ),
      'new: raw': () =>
        closedLoop(
          async () => {
            const key = `${prefix}:raw:${randomUUID()}`;
            const ok = String(await client.sendCommand(['SET', key, '1', 'NX', 'PX', '86400000']));
            if (ok !== 'OK') throw new Error('lost the claim');
            await client.sendCommand(['HSET', `${key}:r`, 'st', 'done', 'rs', '201', 'rh', '[["content-type","application/json"]]', 'rb', bodyB64]);
          },
          c,
          caseMs,
        ),
      'replay: idem': () =>
        closedLoop(
          async (i) => {
            const begun = await engine.begin({ scope: 'bench', key: `r${i % REPLAY_KEYS}`, fingerprint: fp });
            if (begun.kind !== 'replay') throw new Error(`unexpected ${begun.kind}`);
          },
          c,
          caseMs,
        ),
      'replay: raw': () =>
        closedLoop(
          async (i) => {
            const r = await client.sendCommand(['HGETALL', `${prefix}:raw:r${i % REPLAY_KEYS}`]);
            if (!r) throw new Error('missing');
          },
          c,
          caseMs,
        ),
    });
    const out: Measured = [];
    for (const c of concurrencies) {
      log(`  redis store, c=${c}`);
      out.push({ c, r: await interleave(cases(c), rounds) });
    }
    return out;
  } finally {
    // Clean up this run's keys.
    let cursor = '0';
    do {
      const [next, names] = (await client.sendCommand(['SCAN', cursor, 'MATCH', `${prefix}:*`, 'COUNT', '1000'])) as [string, string[]];
      cursor = String(next);
      if (names.length > 0) await client.sendCommand(['DEL', ...names]);
    } while (cursor !== '0');
    client.destroy();
  }
}

function table(measured: Measured): string[] {
  const lines = ['| concurrency | case | idem ops/s | raw ops/s | idem / raw | noise (idem, raw) |', '|---|---|---|---|---|---|'];
  for (const { c, r } of measured) {
    for (const kind of ['new', 'replay'] as const) {
      const a = r[`${kind}: idem`];
      const b = r[`${kind}: raw`];
      lines.push(
        `| ${c} | ${kind === 'new' ? 'new request (claim + finish)' : 'replay'} | ${fmtRate(a.opsPerSec)} | ${fmtRate(b.opsPerSec)} | ${ratio(a.opsPerSec, b.opsPerSec)} | ${fmtNoise(a.noise)}, ${fmtNoise(b.noise)} |`,
      );
    }
  }
  return lines;
}

/** The suite section: the engine on idem/redis vs the same commands raw, at c=16 (and the run's other concurrencies). */
export async function redisStore(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const concurrencies = cfg.concurrencies.includes(16) ? cfg.concurrencies : [...cfg.concurrencies, 16];
  let measured: Measured;
  try {
    measured = await measure(cfg.redisUrl, concurrencies, cfg.caseMs, cfg.rounds, log);
  } catch (error) {
    return { title: 'Redis store: skipped', markdown: `Redis at ${cfg.redisUrl} is not reachable or failed (${(error as Error).message}).` };
  }
  const at16 = measured.find((m) => m.c === 16)!.r;
  const targets: NonNullable<Section['targets']> = {};
  for (const kind of ['new', 'replay'] as const) {
    const a = at16[`${kind}: idem`];
    const b = at16[`${kind}: raw`];
    targets[`redis-${kind}-16`] = {
      value: a.opsPerSec / b.opsPerSec,
      detail: `${fmtRate(a.opsPerSec)} / ${fmtRate(b.opsPerSec)} ops/s`,
      whyMissed:
        kind === 'new'
          ? 'a new key is two round trips as on the raw side (the claim script, the fenced finish script; the replay fast path is skipped while new keys dominate), but two Lua scripts cost the server several times two plain commands (bench/notes.md, "Redis store").'
          : 'the engine decodes the hash into a record and builds the replay (fingerprint compared, retention judged by the server clock bound) on top of the one HGETALL the raw side sends.',
    };
  }
  return {
    title: 'Redis store: engine vs the same commands raw',
    markdown: [
      'idem/redis through the engine (`begin` + `finish`, heartbeat off) against the same work as raw node-redis commands on the same connection, interleaved rounds. ' +
        'New request: raw = `SET NX` + `HSET` of the 1 KB response; idem = claim script + fenced finish script (the replay fast path `HGETALL` is skipped while new keys dominate). ' +
        'Replay: raw = one `HGETALL`; idem = the replay fast path (one `HGETALL`, a `TIME` once a second) and the record decoded.',
      '',
      ...table(measured),
    ].join('\n'),
    targets,
  };
}

// Run alone: `npx tsx bench/redis-store.ts [--seconds 2] [--rounds 3]`.
if (import.meta.url === `file://${process.argv[1]}`) {
  const arg = (name: string, fallback: number) => {
    const i = process.argv.indexOf(`--${name}`);
    return i > 0 ? Number(process.argv[i + 1]) : fallback;
  };
  const seconds = arg('seconds', 2);
  const rounds = arg('rounds', 3);
  const measured = await measure(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', [1, 16, 64], seconds * 1000, rounds, (l) => console.error(l));
  console.log(
    `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC with \`npx tsx bench/redis-store.ts --seconds ${seconds} --rounds ${rounds}\` (node-redis, one connection, Redis on loopback):\n`,
  );
  console.log(table(measured).join('\n'));
}
