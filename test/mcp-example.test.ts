/**
 * examples/mcp/server.ts over a real socket, called by the MCP SDK's Client: the same
 * `create_refund` twice is one refund row and a marked replay; another amount under the same
 * key is a mismatch error result; concurrent duplicates make one row.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { listen, openRefunds } from '../examples/mcp/server.js';
import { KEY_META, REPLAYED_META } from '../src/mcp/index.js';
import { pglite } from './helpers/pglite.js';

describe('examples/mcp', () => {
  it('create_refund: a retried call replays the first refund, another amount under its key is refused, duplicates refund once', async () => {
    const { db, engine } = await openRefunds(pglite());
    const http = await listen(engine, 0);
    const client = new Client({ name: 'agent', version: '1.0.0' });
    try {
      await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`)));
      const tools = (await client.listTools()).tools;
      assert.equal(tools.find((t) => t.name === 'create_refund')?.annotations?.idempotentHint, true);
      const call = { name: 'create_refund', arguments: { orderId: 'ord_1', cents: 1500 }, _meta: { [KEY_META]: 'refund-ord_1-a' } };
      const first = await client.callTool(call);
      const again = await client.callTool(call);
      assert.equal(first.isError, undefined, JSON.stringify(first));
      assert.equal(again._meta?.[REPLAYED_META], true);
      assert.deepEqual(again.structuredContent, first.structuredContent);
      const other = await client.callTool({ ...call, arguments: { orderId: 'ord_1', cents: 99 } });
      assert.equal(other.isError, true);
      assert.equal(other._meta?.['dev.idem/code'], 'IDEM_KEY_MISMATCH');
      // No key: derived from orderId and cents, so the re-emitted call is the same refund.
      const bursts = await Promise.all(
        Array.from({ length: 5 }, () => client.callTool({ name: 'create_refund', arguments: { orderId: 'ord_2', cents: 700 } })),
      );
      assert.ok(bursts.some((r) => !r.isError));
      const { rows } = await db.query<{ order_id: string; n: number }>('SELECT order_id, count(*)::int AS n FROM refunds GROUP BY order_id ORDER BY order_id');
      assert.deepEqual(
        rows.map((r) => [r.order_id, r.n]),
        [
          ['ord_1', 1],
          ['ord_2', 1],
        ],
      );
    } finally {
      await client.close();
      http.closeAllConnections();
      await new Promise((resolve) => http.close(resolve));
      await db.close();
    }
  });
});
