/**
 * The DynamoDB store on dynalite (issue 43), three sides in alternating rounds of one run, all
 * on the same dynalite, which runs in a child process of its own so its CPU is not the load
 * generator's:
 *
 * raw:        the same durable work with no library: a new request is one conditional PutItem
 *             (`attribute_not_exists(pk)`, an in-progress item with a token) and one
 *             conditional UpdateItem that writes the 1 KB response fenced on that token; a
 *             replay is one consistent GetItem.
 * idem:       `engine.begin()` + `finish()` on `DynamoDbStore` (a new key), `engine.begin()` on
 *             a finished key (a replay).
 * Powertools: `makeIdempotent` over `DynamoDBPersistenceLayer` (@aws-lambda-powertools/idempotency,
 *             its default table schema, key `id`), the same 1 KB result; the same key again for
 *             a replay.
 *
 * dynalite is an emulator (docs/guides/dynamodb.md, "dynalite"): its latencies are not
 * DynamoDB's, so only the ratios mean anything, and only as "the same requests on the same
 * server". No real DynamoDB is called.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { CreateTableCommand, DescribeTableCommand, DynamoDBClient, GetItemCommand, PutItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { DynamoDbStore } from '../src/dynamodb/index.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { BenchConfig } from './lib/config.js';
import { BODY, FINGERPRINT, HEADERS, SCOPE, type Section } from './lib/fixtures.js';
import { idemSide, REPLAY_KEYS, seedFinished } from './library.js';
import { comparisonCells, fmtMs, fmtNoise, fmtRate, newAndReplay, ratio, type Sampled } from './lib/measure.js';

const RESULT = { ok: true, body: Buffer.from(BODY).toString('base64') };

/** dynalite on a loopback port in a child process; resolves with the port it printed. */
async function startDynalite(): Promise<{ port: number; child: ChildProcess }> {
  const code =
    "const d = require('dynalite')({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });" +
    "d.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: d.address().port })));";
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await once(lines, 'line')) as [string];
  lines.close();
  return { port: (JSON.parse(line) as { port: number }).port, child };
}

async function table(client: DynamoDBClient, name: string, key: string, sortKey?: string): Promise<void> {
  await client.send(
    new CreateTableCommand({
      TableName: name,
      BillingMode: 'PAY_PER_REQUEST',
      AttributeDefinitions: [{ AttributeName: key, AttributeType: 'S' }, ...(sortKey ? [{ AttributeName: sortKey, AttributeType: 'S' as const }] : [])],
      KeySchema: [{ AttributeName: key, KeyType: 'HASH' }, ...(sortKey ? [{ AttributeName: sortKey, KeyType: 'RANGE' as const }] : [])],
    }),
  );
  while ((await client.send(new DescribeTableCommand({ TableName: name }))).Table?.TableStatus !== 'ACTIVE') {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The raw side: the claim and the fenced finish as conditional writes, the replay as one read. */
function rawSide(client: DynamoDBClient, name: string) {
  const body = { B: BODY };
  return {
    async newRequest(): Promise<void> {
      const key = { pk: { S: `${SCOPE}#${randomUUID()}` }, sk: { S: 'k' } };
      const token = String(Date.now());
      await client.send(
        new PutItemCommand({
          TableName: name,
          Item: { ...key, st: { S: 'running' }, tok: { N: token }, fp: { B: FINGERPRINT }, exp: { N: String(Math.floor(Date.now() / 1000) + 86_400) } },
          ConditionExpression: 'attribute_not_exists(pk)',
        }),
      );
      await client.send(
        new UpdateItemCommand({
          TableName: name,
          Key: key,
          UpdateExpression: 'SET st = :done, rs = :status, rh = :headers, rb = :body',
          ConditionExpression: 'tok = :tok',
          ExpressionAttributeValues: {
            ':done': { S: 'done' },
            ':status': { N: '201' },
            ':headers': { S: JSON.stringify(HEADERS) },
            ':body': body,
            ':tok': { N: token },
          },
        }),
      );
    },
    async replay(i: number): Promise<void> {
      const out = await client.send(
        new GetItemCommand({ TableName: name, Key: { pk: { S: `${SCOPE}#k${(i % REPLAY_KEYS) + 1}` }, sk: { S: 'k' } }, ConsistentRead: true }),
      );
      if (out.Item?.st?.S !== 'done') throw new Error('raw replay found no finished item');
    },
    async seed(i: number): Promise<void> {
      await client.send(
        new PutItemCommand({
          TableName: name,
          Item: { pk: { S: `${SCOPE}#k${i}` }, sk: { S: 'k' }, st: { S: 'done' }, rs: { N: '201' }, rh: { S: JSON.stringify(HEADERS) }, rb: body },
        }),
      );
    },
  };
}

export async function dynamodbSection(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const { port, child } = await startDynalite();
  const client = new DynamoDBClient({
    endpoint: `http://127.0.0.1:${port}`,
    region: 'us-east-1',
    credentials: { accessKeyId: 'bench', secretAccessKey: 'bench' },
    maxAttempts: 1,
  });
  const rows: string[] = [];
  const headline: Record<string, string> = {};
  try {
    await table(client, 'raw', 'pk', 'sk');
    await table(client, 'idem', 'pk', 'sk');
    await table(client, 'powertools', 'id');
    const raw = rawSide(client, 'raw');
    const engine = new IdempotencyEngine({ store: new DynamoDbStore({ client, table: 'idem' }) });
    const idem = idemSide(engine);
    const { makeIdempotent, IdempotencyConfig } = await import('@aws-lambda-powertools/idempotency');
    const { DynamoDBPersistenceLayer } = await import('@aws-lambda-powertools/idempotency/dynamodb');
    const ptConfig = new IdempotencyConfig({ eventKeyJmesPath: 'key' });
    // Outside Lambda there is no invocation deadline; give it idem's default 60 s lease.
    ptConfig.registerLambdaContext({ getRemainingTimeInMillis: () => 60_000 } as never);
    const ptWork = makeIdempotent(async (_event: { key: string }) => RESULT, {
      persistenceStore: new DynamoDBPersistenceLayer({ tableName: 'powertools', awsSdkV3Client: client as never }),
      config: ptConfig,
    });
    const powertools = {
      newRequest: async () => {
        await ptWork({ key: randomUUID() });
      },
      replay: async (i: number) => {
        await ptWork({ key: `k${(i % REPLAY_KEYS) + 1}` });
      },
    };
    for (let i = 1; i <= REPLAY_KEYS; i++) {
      await raw.seed(i);
      await ptWork({ key: `k${i}` });
    }
    await seedFinished(engine);
    for (const c of cfg.concurrencies.filter((n) => n <= 16)) {
      const measured = await newAndReplay({ raw, idem, powertools }, c, cfg, log);
      for (const what of ['new request', 'replay'] as const) {
        const r = measured[what];
        rows.push(row(c, what, r.raw, r.idem, r.powertools));
        headline[`DynamoDB (dynalite), ${what}, c=${c}: idem / raw`] = ratio(r.idem.opsPerSec, r.raw.opsPerSec);
        headline[`DynamoDB (dynalite), ${what}, c=${c}: idem / Powertools`] = ratio(r.idem.opsPerSec, r.powertools.opsPerSec);
        log(
          `  ${what} c=${c}: raw ${Math.round(r.raw.opsPerSec)}/s, idem ${Math.round(r.idem.opsPerSec)}/s, Powertools ${Math.round(r.powertools.opsPerSec)}/s`,
        );
      }
    }
  } finally {
    client.destroy();
    child.kill('SIGTERM');
  }
  return {
    title: 'DynamoDB store on dynalite: idem against raw conditional writes and Powertools',
    markdown: [
      'The same dynalite (an in-process DynamoDB emulator, here in a child process of its own) for all three sides. ' +
        'raw: a conditional PutItem and a token-fenced UpdateItem per new request, one consistent GetItem per replay. ' +
        'idem: `DynamoDbStore` through the engine. Powertools: `makeIdempotent` over `DynamoDBPersistenceLayer` (2.35.0). ' +
        `${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side. dynalite is not DynamoDB: read the ratios, not the rates.`,
      '',
      '| concurrency | case | raw ops/s | idem ops/s | **idem / raw** | Powertools ops/s | **idem / Powertools** | raw p50 / p99 ms | idem p50 / p99 ms | Powertools p50 / p99 ms | noise raw / idem / Powertools |',
      '|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...rows,
    ].join('\n'),
    headline,
  };
}

function row(c: number, what: string, raw: Sampled, idem: Sampled, pt: Sampled): string {
  const cells = comparisonCells(raw, idem);
  return `| ${c} | ${what} | ${cells.rates.join(' | ')} | ${fmtRate(pt.opsPerSec)} | **${ratio(idem.opsPerSec, pt.opsPerSec)}** | ${cells.spread[0]} | ${cells.spread[1]} | ${fmtMs(pt.p50Ms)} / ${fmtMs(pt.p99Ms)} | ${fmtNoise(raw.noise)} / ${fmtNoise(idem.noise)} / ${fmtNoise(pt.noise)} |`;
}
