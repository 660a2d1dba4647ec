/**
 * idem/redis through the engine vs the same work as raw commands through the same client
 * (node-redis), interleaved in rounds, at concurrency 1 / 16 / 64. Not a test.
 *
 *   npx tsx bench/redis-store.ts [--seconds 2] [--rounds 3]
 *
 * new request: raw = `SET key NX` (the claim) + `HSET` of the response (1 KB body);
 *              idem = engine.begin() + execution.finish() (claim script + finish script).
 * replay:      raw = `HGETALL` of the stored response;
 *              idem = engine.begin() on a finished key (the claim script answers the replay).
 */
import { randomUUID } from 'node:crypto';
import { createClient } from '@redis/client';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { RedisStore } from '../src/redis/index.js';
import { closedLoop, fmtNoise, fmtRate, interleave, ratio } from './lib/measure.js';

const arg = (name: string, fallback: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
};
const SECONDS = arg('seconds', 2);
const ROUNDS = arg('rounds', 3);
const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const client = createClient({ url });
await client.connect();
const prefix = `idem-bench-${randomUUID().slice(0, 8)}`;
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

const cases = (c: number) => {
  const ms = SECONDS * 1000;
  return {
    'new: idem': () =>
      closedLoop(
        async () => {
          const begun = await engine.begin({ scope: 'bench', key: randomUUID(), fingerprint: fp });
          if (begun.kind !== 'execute') throw new Error(`unexpected ${begun.kind}`);
          await begun.execution.finish(response);
        },
        c,
        ms,
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
        ms,
      ),
    'replay: idem': () =>
      closedLoop(
        async (i) => {
          const begun = await engine.begin({ scope: 'bench', key: `r${i % REPLAY_KEYS}`, fingerprint: fp });
          if (begun.kind !== 'replay') throw new Error(`unexpected ${begun.kind}`);
        },
        c,
        ms,
      ),
    'replay: raw': () =>
      closedLoop(
        async (i) => {
          const r = await client.sendCommand(['HGETALL', `${prefix}:raw:r${i % REPLAY_KEYS}`]);
          if (!r) throw new Error('missing');
        },
        c,
        ms,
      ),
  };
};

const lines = ['| concurrency | case | idem ops/s | raw ops/s | idem / raw | noise (idem, raw) |', '|---|---|---|---|---|---|'];
for (const c of [1, 16, 64]) {
  const r = await interleave(cases(c), ROUNDS);
  for (const kind of ['new', 'replay'] as const) {
    const a = r[`${kind}: idem`];
    const b = r[`${kind}: raw`];
    const line = `| ${c} | ${kind === 'new' ? 'new request (claim + finish)' : 'replay'} | ${fmtRate(a.opsPerSec)} | ${fmtRate(b.opsPerSec)} | ${ratio(a.opsPerSec, b.opsPerSec)} | ${fmtNoise(a.noise)}, ${fmtNoise(b.noise)} |`;
    lines.push(line);
    console.error(line);
  }
}
console.log(
  `Measured ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC with \`npx tsx bench/redis-store.ts --seconds ${SECONDS} --rounds ${ROUNDS}\` (node-redis, one connection, Redis on loopback):\n`,
);
console.log(lines.join('\n'));

// Clean up this run's keys.
let cursor = '0';
do {
  const [next, names] = (await client.sendCommand(['SCAN', cursor, 'MATCH', `${prefix}:*`, 'COUNT', '1000'])) as [string, string[]];
  cursor = String(next);
  if (names.length > 0) await client.sendCommand(['DEL', ...names]);
} while (cursor !== '0');
client.destroy();
