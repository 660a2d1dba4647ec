/**
 * An MCP server over stdio for test/mcp.test.ts's crash test: PostgresStore on
 * MCP_DATABASE_URL, table MCP_TABLE, a short lease. Its `transfer` tool commits a `debit`
 * phase, then (while MCP_HANG is set) prints `debit committed` to stderr and hangs there until
 * the test SIGKILLs it; without MCP_HANG it goes on to the `credit` phase. The effects are rows
 * of `<table>_effects`, written in the phases' transactions.
 */
import pg from 'pg';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { PostgresStore } from '../../src/postgres/index.js';
import { IdempotencyEngine } from '../../src/engine/engine.js';
import { idempotentTool } from '../../src/mcp/index.js';

const table = process.env.MCP_TABLE!;
const pool = new pg.Pool({ connectionString: process.env.MCP_DATABASE_URL, max: 4 });
const store = new PostgresStore({ client: pool, table });
const engine = new IdempotencyEngine({ store, leaseMs: 1_500 });
const effect = (note: string) => async (tx: pg.PoolClient) => {
  await tx.query(`INSERT INTO "${table}_effects" (note) VALUES ($1)`, [note]);
  return note;
};

const server = new McpServer({ name: 'idem-crash', version: '1.0.0' });
idempotentTool(
  server,
  'transfer',
  { inputSchema: { id: z.string() } },
  async ({ id }, _extra, ctx) => {
    await ctx.phase('debit', effect(`debit ${id}`) as never);
    if (process.env.MCP_HANG) {
      process.stderr.write('debit committed\n');
      await new Promise(() => undefined); // killed here
    }
    await ctx.phase('credit', effect(`credit ${id}`) as never);
    return { content: [{ type: 'text', text: `transferred ${id} by pid ${process.pid}` }] };
  },
  { engine },
);
await server.connect(new StdioServerTransport());
process.stderr.write('ready\n');
