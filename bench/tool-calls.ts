/**
 * (MCP) Tool calls per second: an MCP server with one write tool (an INSERT on PostgreSQL), called
 * by the SDK's own client over its in-memory transport, so the figures are the tool layer alone.
 * Bare: the tool registered with `server.registerTool`, its INSERT on the pool. idem: the same tool
 * through `idempotentTool` (idem/mcp), its INSERT in an atomic phase. New: every call sends a new
 * `_meta['dev.idem/idempotency-key']`. Replayed: every call sends one key already done, so idem
 * answers the stored result and the bare tool inserts again. Sides alternate round by round in one
 * run (bench/lib/measure.ts); the ratio is idem / bare.
 */
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import pg from 'pg';
import { z } from 'zod';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { idempotentTool } from '../src/mcp/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/store.js';
import { type BenchConfig, uniqueTable } from './lib/config.js';
import { dropTable, type Section } from './lib/fixtures.js';
import { closedLoop, comparisonCells, interleave, ratio } from './lib/measure.js';

const KEY = 'dev.idem/idempotency-key';

async function connect(server: McpServer): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const client = new Client({ name: 'bench', version: '1.0.0' });
  await client.connect(clientSide);
  return client;
}

export async function toolCalls(cfg: BenchConfig, log: (line: string) => void): Promise<Section> {
  const pool = new pg.Pool({ connectionString: cfg.databaseUrl, max: 20 });
  const table = uniqueTable('tools');
  const keys = `${table}_keys`;
  await pool.query(`CREATE TABLE ${table} (id bigserial PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL)`);
  const store = new PostgresStore({ client: pool, table: keys });
  await store.migrate();
  const engine = new IdempotencyEngine<Queryable>({ store });
  const input = { orderId: z.string(), cents: z.number().int() };
  const insert = async (db: Queryable, orderId: string, cents: number) =>
    (await db.query(`INSERT INTO ${table} (order_id, cents) VALUES ($1, $2) RETURNING id`, [orderId, cents])).rows[0] as { id: string };

  const bareServer = new McpServer({ name: 'bare', version: '1.0.0' });
  bareServer.registerTool('refund', { inputSchema: input }, async ({ orderId, cents }) => {
    const row = await insert(pool, orderId, cents);
    return { content: [{ type: 'text' as const, text: `refund ${row.id}` }] };
  });
  const idemServer = new McpServer({ name: 'idem', version: '1.0.0' });
  idempotentTool(
    idemServer,
    'refund',
    { inputSchema: input },
    async ({ orderId, cents }, _extra, ctx) => {
      const row = await ctx.phase('refund', (tx: Queryable) => insert(tx, orderId, cents));
      return { content: [{ type: 'text' as const, text: `refund ${row.id}` }] };
    },
    { engine },
  );
  const bare = await connect(bareServer);
  const idem = await connect(idemServer);
  const call = (client: Client, key: string) => client.callTool({ name: 'refund', arguments: { orderId: 'o-1', cents: 100 }, _meta: { [KEY]: key } });
  const done = randomUUID();
  const first = await call(idem, done);
  if (first.isError) throw new Error(`the idem tool failed: ${JSON.stringify(first)}`);
  const rows: string[] = [];
  const headline: Record<string, string> = {};
  try {
    for (const c of cfg.concurrencies) {
      const run = (op: () => Promise<unknown>) => () => closedLoop(op, c, cfg.caseMs);
      if (cfg.warmupMs > 0) await closedLoop(() => call(idem, randomUUID()), c, cfg.warmupMs);
      const r = await interleave(
        {
          bareNew: run(() => call(bare, randomUUID())),
          idemNew: run(() => call(idem, randomUUID())),
          bareReplay: run(() => call(bare, done)),
          idemReplay: run(() => call(idem, done)),
        },
        cfg.rounds,
      );
      for (const [what, b, i] of [
        ['new key', r.bareNew, r.idemNew],
        ['replayed', r.bareReplay, r.idemReplay],
      ] as const) {
        const cells = comparisonCells(b, i);
        rows.push(`| ${what} | ${c} | ${cells.rates.join(' | ')} | ${cells.spread.join(' | ')} |`);
        log(`  ${what} c=${c}: bare ${Math.round(b.opsPerSec)}/s, idem ${Math.round(i.opsPerSec)}/s (${ratio(i.opsPerSec, b.opsPerSec)})`);
        headline[`MCP tool calls, ${what}, c=${c}: idem / bare`] = ratio(i.opsPerSec, b.opsPerSec);
      }
    }
  } finally {
    await bare.close();
    await idem.close();
    await dropTable(pool, table);
    await dropTable(pool, keys);
    await pool.end();
  }
  return {
    title: 'MCP tool calls: idem/mcp against a bare tool',
    markdown: [
      'One write tool (an INSERT on PostgreSQL) on an MCP server, called by the SDK client over its in-memory transport. ' +
        'Bare: `registerTool`, INSERT on the pool. idem: `idempotentTool`, INSERT in an atomic phase, a new key per call (new) or one finished key (replayed: the bare tool inserts again). ' +
        `${cfg.rounds} alternating rounds of ${cfg.caseMs} ms per side.`,
      '',
      '| calls | concurrency | bare calls/s | idem calls/s | **idem / bare** | bare p50 / p99 ms | idem p50 / p99 ms | noise bare / idem |',
      '|---|---:|---:|---:|---:|---:|---:|---:|',
      ...rows,
    ].join('\n'),
    headline,
  };
}
