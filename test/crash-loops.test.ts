/**
 * Crash loops end at maxAttempts (protocol.md K23), with real processes: a handler that kills
 * its process on every run (process.exit, SIGKILL) is run at most `maxAttempts` times; then an
 * HTTP key answers the stored `request-failed-permanently` problem, and a RabbitMQ message is
 * dead-lettered. The child is test/helpers/crash-loop-process.ts; this file restarts it after
 * every death, as a supervisor would.
 *
 * HTTP runs on PostgreSQL (DATABASE_URL) and Redis (REDIS_URL); the consumer on PostgreSQL and
 * RabbitMQ (AMQP_URL, default the local broker), quorum and classic queues.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import amqplib from 'amqplib';
import { spawnTs } from './helpers/process.js';
import { sleep } from './helpers/wait.js';
import { consumerTables, until } from './helpers/consumer-setup.js';
import { PostgresStore } from '../src/postgres/index.js';
import { REASON_HEADER } from '../src/amqp/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { MemoryStore } from '../src/memory/index.js';
import { needs, serviceUrl } from './helpers/services.js';

const SCRIPT = fileURLToPath(new URL('./helpers/crash-loop-process.ts', import.meta.url));
const MAX_ATTEMPTS = 3;
/** Restarts allowed before the test gives up: the old code ran the handler on every one. */
const RESTARTS = MAX_ATTEMPTS + 3;
const DATABASE_URL = process.env.DATABASE_URL;
const REDIS_URL = process.env.REDIS_URL;
const AMQP_URL = serviceUrl('AMQP_URL');

const runsIn = (output: string): number => output.split('\n').filter((line) => line.startsWith('RUN ')).length;

/** Sends the request until it is not a 409 (the dead worker's lease runs out); undefined when the server died mid-request. */
async function send(port: number, key: string): Promise<Response | undefined> {
  const stop = performance.now() + 60_000;
  for (;;) {
    let response: Response;
    try {
      response = await fetch(`http://127.0.0.1:${port}/charges`, {
        method: 'POST',
        headers: { 'idempotency-key': key, 'content-type': 'application/json' },
        body: '{"amount":100}',
      });
    } catch {
      return undefined; // the handler killed the server
    }
    if (response.status !== 409) return response;
    await response.arrayBuffer();
    assert.ok(performance.now() < stop, 'the key stayed in progress for a minute');
    await sleep(100);
  }
}

const backends = [
  { name: 'PostgreSQL', backend: 'pg', env: DATABASE_URL ? { DATABASE_URL } : undefined },
  { name: 'Redis', backend: 'redis', env: REDIS_URL ? { REDIS_URL } : undefined },
] as const;

for (const { name, backend, env } of backends) {
  describe(`HTTP crash loop on ${name}`, { skip: env ? false : needs(backend === 'pg' ? 'DATABASE_URL' : 'REDIS_URL') }, () => {
    let pool: pg.Pool | undefined;
    const tables: string[] = [];
    before(() => {
      if (backend === 'pg') pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    });
    after(async () => {
      for (const t of tables) {
        await pool?.query(`DROP TABLE IF EXISTS "${t}_blobs"`);
        await pool?.query(`DROP TABLE IF EXISTS "${t}"`);
        await pool?.query(`DROP SEQUENCE IF EXISTS "${t}_lock_version_seq"`);
      }
      await pool?.end();
    });

    for (const how of ['exit', 'sigkill'] as const) {
      it(`a handler that kills its server (${how}) on every run: ${MAX_ATTEMPTS} runs, then the stored request-failed-permanently problem`, {
        timeout: 600_000,
      }, async () => {
        const where = `idem_crashloop_${randomBytes(4).toString('hex')}`;
        if (pool) {
          await new PostgresStore({ client: pool, table: where }).migrate();
          tables.push(where);
        }
        const key = randomUUID();
        let runs = 0;
        let answer: Response | undefined;
        for (let restart = 0; restart <= RESTARTS && !answer; restart++) {
          const child = spawnTs(SCRIPT, { ...env }, ['http', backend, where, how, String(MAX_ATTEMPTS)]);
          const port = Number((await child.waitFor(/LISTENING (\d+)/))[1]);
          answer = await send(port, key);
          if (answer) await child.kill();
          else await child.exited;
          runs += runsIn(child.output());
        }
        assert.ok(answer, `the handler ran ${runs} times over ${RESTARTS + 1} restarts and the key never ended`);
        assert.equal(runs, MAX_ATTEMPTS, 'the handler runs maxAttempts times, then never again');
        assert.equal(answer.status, 500);
        const problem = (await answer.json()) as { type: string; detail: string };
        assert.match(problem.type, /request-failed-permanently$/);
        assert.match(problem.detail, new RegExp(`failed on ${MAX_ATTEMPTS} attempts`));
        // The stored problem is the key's answer from then on, replayed without running.
        const child = spawnTs(SCRIPT, { ...env }, ['http', backend, where, how, String(MAX_ATTEMPTS)]);
        const port = Number((await child.waitFor(/LISTENING (\d+)/))[1]);
        const replay = await send(port, key);
        await child.kill();
        assert.ok(replay, 'a replay does not run the handler');
        assert.equal(replay.status, 500);
        assert.equal(replay.headers.get('idempotent-replayed'), 'true');
        assert.equal(runsIn(child.output()), 0);
      });
    }
  });
}

describe('RabbitMQ consumer crash loop (idem on PostgreSQL)', { skip: needs('DATABASE_URL', 'AMQP_URL') }, () => {
  let pool: pg.Pool;
  let connection: amqplib.ChannelModel;
  let channel: amqplib.ConfirmChannel;
  const queues: string[] = [];
  const drops: Array<() => Promise<void>> = [];
  before(async () => {
    pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    connection = await amqplib.connect(AMQP_URL!);
    channel = await connection.createConfirmChannel();
  });
  after(async () => {
    for (const q of queues) await channel.deleteQueue(q).catch(() => undefined);
    await connection.close();
    for (const drop of drops) await drop();
    await pool.end();
  });

  for (const queueType of ['quorum', 'classic'] as const) {
    for (const how of ['exit', 'sigkill'] as const) {
      it(`a handler that kills its consumer (${how}) on every delivery: ${MAX_ATTEMPTS} runs, then dead-lettered (${queueType} queue)`, {
        timeout: 600_000,
      }, async () => {
        const queue = `idem-crashloop-${randomBytes(4).toString('hex')}`;
        const dead = `${queue}.dead`;
        queues.push(queue, `${queue}.idem-retry`, dead);
        await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': queueType } });
        await channel.assertQueue(dead, { durable: true });
        const tables = await consumerTables(pool);
        drops.push(tables.drop);
        const id = randomUUID();
        await new Promise<void>((resolve, reject) =>
          channel.sendToQueue(queue, Buffer.from('{"order":1}'), { messageId: id, contentType: 'application/json', persistent: true }, (err) =>
            err ? reject(err) : resolve(),
          ),
        );
        let runs = 0;
        let deadLettered: amqplib.GetMessage | false = false;
        for (let restart = 0; restart <= RESTARTS && !deadLettered; restart++) {
          const child = spawnTs(SCRIPT, { DATABASE_URL: DATABASE_URL!, AMQP_URL: AMQP_URL! }, ['amqp', queue, tables.table, dead, how, String(MAX_ATTEMPTS)]);
          await child.waitFor(/READY/);
          // The child dies on its delivery, or dead-letters it and lives on.
          let exited = false;
          void child.exited.then(() => (exited = true));
          const stop = performance.now() + 120_000;
          while (!exited && !deadLettered) {
            assert.ok(performance.now() < stop, `the consumer neither died nor dead-lettered in 2 min:\n${child.output()}`);
            deadLettered = await channel.get(dead, { noAck: true });
            if (!deadLettered) await sleep(50);
          }
          if (!exited) await child.kill();
          runs += runsIn(child.output());
        }
        assert.ok(deadLettered, `the handler ran ${runs} times over ${RESTARTS + 1} restarts and the message was never dead-lettered`);
        assert.equal(runs, MAX_ATTEMPTS, 'the handler runs maxAttempts times, then never again');
        assert.equal(deadLettered.properties.messageId, id);
        assert.equal(deadLettered.properties.headers?.[REASON_HEADER], 'max-attempts');
        assert.deepEqual(await tables.counts(), new Map([[id, 1]]), 'the phase committed once; the takeovers resumed after it');
      });
    }
  }
});

describe('a release the store missed (protocol.md K23)', () => {
  it('is tried again in the background, so an outage shorter than the lease does not count as a crashed attempt', async () => {
    const store = new MemoryStore();
    let failNext = true;
    let releases = 0;
    const release = store.release.bind(store);
    store.release = async (ref) => {
      releases++;
      if (failNext) {
        failNext = false;
        throw Object.assign(new Error('connect ECONNRESET'), { code: 'ECONNRESET' });
      }
      return release(ref);
    };
    const engine = new IdempotencyEngine({ store, leaseMs: 300, heartbeatMs: 0 });
    const input = { scope: 'orders', key: 'k-1', fingerprint: new Uint8Array(32) };
    const first = await engine.begin(input);
    assert.equal(first.kind, 'execute');
    await assert.rejects(first.execution.release(), /ECONNRESET/);
    await until(() => releases >= 2, 10_000, 'the release tried again');
    await sleep(400); // the lease would have run out by now
    const next = await engine.begin(input);
    assert.equal(next.kind, 'execute');
    assert.equal(next.execution.failedAttempts, 0, 'the release landed: the takeover counts no crash');
    await next.execution.release();
  });
});
