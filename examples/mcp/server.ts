/**
 * An MCP server with one write tool, `create_refund`, registered through idem/mcp on PGlite: an
 * agent that sends the same call again (the model re-emits it, the client times out and
 * retries) gets the first refund back, marked `_meta['dev.idem/replayed']`, and the refund row
 * is written once. Run it: `npx tsx examples/mcp/server.ts` (Streamable HTTP on PORT, default
 * 3000, path /mcp). Run by test/mcp-example.test.ts; docs/guides/mcp.md shows it.
 */
import { createServer, type Server } from 'node:http';
import { randomUUID } from 'node:crypto';
import { PGlite } from '@electric-sql/pglite';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';
import { IdempotencyEngine } from 'idem';
import { idempotentTool } from 'idem/mcp';
import { PostgresStore, type Queryable } from 'idem/postgres';

export const REFUNDS_SCHEMA = `CREATE TABLE IF NOT EXISTS refunds (id text PRIMARY KEY, order_id text NOT NULL, cents int NOT NULL)`;

// #region tool
/** An McpServer whose `create_refund` tool refunds at most once per key. */
export function refundServer(engine: IdempotencyEngine<Queryable>): McpServer {
  const server = new McpServer({ name: 'refunds', version: '1.0.0' });
  idempotentTool(
    server,
    'create_refund',
    {
      description: 'Refunds part of an order. Send _meta["dev.idem/idempotency-key"] to make a retry safe.',
      inputSchema: { orderId: z.string(), cents: z.number().int().positive(), reason: z.string().optional() },
    },
    async ({ orderId, cents }, _extra, ctx) => {
      // The refund row commits in one transaction with idem's record of the phase.
      const refund = await ctx.phase('refund', async (tx: Queryable) => {
        const id = `re_${randomUUID()}`;
        await tx.query('INSERT INTO refunds (id, order_id, cents) VALUES ($1, $2, $3)', [id, orderId, cents]);
        return { id, orderId, cents };
      });
      return { content: [{ type: 'text', text: `Refunded ${cents} cents on ${orderId}: ${refund.id}` }], structuredContent: refund };
    },
    // No key sent: the key is the order and the amount (never the per-turn toolCallId).
    { engine, keyFields: ['orderId', 'cents'] },
  );
  return server;
}
// #endregion tool

/** Serves `refundServer` over stateless Streamable HTTP at `/mcp`. */
export async function listen(engine: IdempotencyEngine<Queryable>, port: number): Promise<Server> {
  const http = createServer(async (req, res) => {
    const server = refundServer(engine);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise<void>((resolve) => http.listen(port, '127.0.0.1', resolve));
  return http;
}

/** A PGlite database with the refunds table and idem's, and an engine on it. */
export async function openRefunds(db = new PGlite()) {
  await db.exec(REFUNDS_SCHEMA);
  const store = new PostgresStore({ client: db });
  await store.migrate();
  return { db, engine: new IdempotencyEngine<Queryable>({ store }) };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { engine } = await openRefunds();
  const http = await listen(engine, Number(process.env.PORT ?? 3000));
  console.log(`refunds MCP server on http://127.0.0.1:${(http.address() as { port: number }).port}/mcp`);
}
