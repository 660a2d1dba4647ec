/**
 * idem/mcp over the real MCP SDK: an McpServer behind the Streamable HTTP transport on a
 * loopback port, called by the SDK's Client, on every work store (memory, PGlite, PostgreSQL,
 * RedisStore + PostgresPhases); and a stdio server process SIGKILLed mid-call, then restarted
 * (PostgreSQL). Effects are the store harness's rows, written in the phases' transactions.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { type CallToolResult, idempotentTool, idempotentToolHandler, KEY_META, REPLAYED_META } from '../src/mcp/index.js';
import { PostgresStore } from '../src/postgres/index.js';
import { useWorkStore, workStores } from './helpers/work-stores.js';
import { deferred, type Deferred } from './helpers/http.js';
import { tableName } from './helpers/engines.js';
import { childEnv, ROOT } from './helpers/process.js';
import type { StoreHarness } from './helpers/stores.js';

/** A tool result as the client got it, without the replay marker: what a replay must equal. */
function unmarked(result: unknown): unknown {
  const r = structuredClone(result) as CallToolResult;
  if (r._meta) {
    delete r._meta[REPLAYED_META];
    if (Object.keys(r._meta).length === 0) delete r._meta;
  }
  return r;
}

function textOf(result: CallToolResult): string {
  return (result.content[0] as unknown as { text: string }).text;
}

interface McpApp {
  url: string;
  /** Calls the tool as `principal` (a bearer token the server maps to authInfo.clientId). */
  call(name: string, args: Record<string, unknown>, opts?: { key?: string; principal?: string }): Promise<CallToolResult>;
  runs: Map<string, number>;
  gate: Deferred<void>;
  entered: Deferred<void>;
  listTools(): Promise<{ name: string; annotations?: Record<string, unknown> }[]>;
  close(): Promise<void>;
}

/** A real McpServer per request (stateless Streamable HTTP) over one engine on `h.store`. */
async function startApp(h: StoreHarness): Promise<McpApp> {
  const engine = new IdempotencyEngine({ store: h.store });
  const runs = new Map<string, number>();
  const ran = (name: string) => runs.set(name, (runs.get(name) ?? 0) + 1);
  const gated = { gate: deferred<void>(), entered: deferred<void>() };

  const build = () => {
    const server = new McpServer({ name: 'idem-test', version: '1.0.0' });
    idempotentTool(
      server,
      'create_refund',
      { description: 'Refunds an order', inputSchema: { orderId: z.string(), cents: z.number().int(), note: z.string().optional() } },
      async ({ orderId, cents }, _extra, ctx) => {
        ran('create_refund');
        const row = await ctx.phase('refund', h.effect(`refund ${orderId} ${cents}`));
        return {
          content: [{ type: 'text', text: `refunded ${cents} on ${orderId}` }],
          structuredContent: { refundId: `${row.note}:${Math.random()}`, at: new Date().toISOString() },
        };
      },
      { engine, keyFields: ['orderId', 'cents'] },
    );
    idempotentTool(
      server,
      'slow_refund',
      { inputSchema: { orderId: z.string() } },
      async ({ orderId }, _extra, ctx) => {
        ran('slow_refund');
        gated.entered.resolve();
        await gated.gate.promise;
        await ctx.phase('refund', h.effect(`slow ${orderId}`));
        return { content: [{ type: 'text', text: `slow ${orderId} ${Math.random()}` }] };
      },
      { engine },
    );
    idempotentTool(
      server,
      'big_total',
      { inputSchema: { day: z.string() } },
      async ({ day }, _extra, ctx) => {
        ran('big_total');
        await ctx.phase('total', h.effect(`total ${day}`));
        return { content: [{ type: 'text', text: 'ok' }], structuredContent: { total: 10n } } as unknown as CallToolResult;
      },
      { engine },
    );
    for (const policy of ['store', 'release'] as const) {
      idempotentTool(
        server,
        `declined_${policy}`,
        { inputSchema: { id: z.string() } },
        async ({ id }) => {
          ran(`declined_${policy}`);
          return { content: [{ type: 'text', text: `declined ${id} ${Math.random()}` }], isError: true };
        },
        { engine, errorResults: policy },
      );
    }
    // The handler wrapper on the SDK's own registerTool, with the key in a declared argument.
    server.registerTool(
      'send_mail',
      { inputSchema: { requestId: z.string(), to: z.string() }, annotations: { idempotentHint: false } },
      idempotentToolHandler(
        'send_mail',
        async ({ to }: { requestId: string; to: string }, _extra, ctx) => {
          ran('send_mail');
          await ctx.phase('send', h.effect(`mail ${to}`));
          return { content: [{ type: 'text', text: `sent to ${to} ${Math.random()}` }] };
        },
        { engine, keyArgument: 'requestId' },
      ),
    );
    return server;
  };

  const http: Server = createServer(async (req: IncomingMessage & { auth?: { token: string; clientId: string; scopes: string[] } }, res) => {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (token) req.auth = { token, clientId: token, scopes: [] };
    const server = build();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`;
  const clients = new Map<string, Client>();
  const clientFor = async (principal: string) => {
    let client = clients.get(principal);
    if (!client) {
      client = new Client({ name: `agent-${principal}`, version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${principal}` } } }));
      clients.set(principal, client);
    }
    return client;
  };
  return {
    url,
    runs,
    ...gated,
    async call(name, args, opts = {}) {
      const client = await clientFor(opts.principal ?? 'alice');
      const _meta = opts.key === undefined ? undefined : { [KEY_META]: opts.key };
      return (await client.callTool({ name, arguments: args, ...(_meta ? { _meta } : {}) })) as CallToolResult;
    },
    async listTools() {
      return (await (await clientFor('alice')).listTools()).tools;
    },
    async close() {
      for (const client of clients.values()) await client.close();
      http.closeAllConnections();
      await new Promise<void>((resolve) => http.close(() => resolve()));
    },
  };
}

for (const factory of workStores) {
  describe(`idem/mcp over Streamable HTTP on ${factory.name}`, () => {
    const fresh = useWorkStore(factory);
    const apps: McpApp[] = [];
    const app = async () => {
      const h = await fresh();
      const a = await startApp(h);
      apps.push(a);
      return { h, a };
    };
    after(async () => {
      for (const a of apps) await a.close();
    });

    it('the same tools/call sent 5 times with one key: one effect, the first result replayed exactly, marked as a replay', async () => {
      const { h, a } = await app();
      const results: CallToolResult[] = [];
      for (let i = 0; i < 5; i++) results.push(await a.call('create_refund', { orderId: 'o-1', cents: 500 }, { key: 'refund-o-1' }));
      assert.equal(a.runs.get('create_refund'), 1);
      assert.deepEqual(await h.effects(), ['refund o-1 500']);
      assert.equal(results[0]!.isError, undefined);
      assert.equal(results[0]!._meta?.[REPLAYED_META], undefined, 'the first call is not a replay');
      for (const replay of results.slice(1)) {
        assert.equal(replay._meta?.[REPLAYED_META], true);
        assert.deepEqual(unmarked(replay), unmarked(results[0]), 'the stored CallToolResult exactly');
      }
      // Another key runs again.
      await a.call('create_refund', { orderId: 'o-1', cents: 500 }, { key: 'refund-o-1-again' });
      assert.equal(a.runs.get('create_refund'), 2);
    });

    it('10 concurrent calls with one key: one effect; the others are told to retry later, then get its result', async () => {
      const { h, a } = await app();
      let settled = 0;
      const allButOne = deferred<void>();
      const calls = Array.from({ length: 10 }, () =>
        a.call('slow_refund', { orderId: 'o-9' }, { key: 'slow-o-9' }).then((result) => {
          if (++settled === 9) allButOne.resolve();
          return result;
        }),
      );
      await a.entered.promise;
      await allButOne.promise; // nine answered while the first still runs
      a.gate.resolve();
      const results = await Promise.all(calls);
      assert.equal(a.runs.get('slow_refund'), 1);
      assert.deepEqual(await h.effects(), ['slow o-9']);
      const busy = results.filter((r) => r.isError);
      const done = results.filter((r) => !r.isError);
      assert.equal(done.length, 1);
      assert.equal(busy.length, 9);
      for (const r of busy) {
        assert.equal(r._meta?.['dev.idem/code'], 'IDEM_KEY_IN_PROGRESS');
        assert.ok((r._meta?.['dev.idem/retry-after-ms'] as number) > 0, 'says when to retry');
      }
      const retry = await a.call('slow_refund', { orderId: 'o-9' }, { key: 'slow-o-9' });
      assert.deepEqual(unmarked(retry), unmarked(done[0]));
      assert.equal(a.runs.get('slow_refund'), 1);
    });

    it('different arguments under one key: a mismatch error result, the tool not run again', async () => {
      const { h, a } = await app();
      const first = await a.call('create_refund', { orderId: 'o-2', cents: 100 }, { key: 'k-2' });
      assert.equal(first.isError, undefined);
      const other = await a.call('create_refund', { orderId: 'o-2', cents: 9_999 }, { key: 'k-2' });
      assert.equal(other.isError, true);
      assert.equal(other._meta?.['dev.idem/code'], 'IDEM_KEY_MISMATCH');
      assert.match(textOf(other), /other arguments/);
      assert.equal(a.runs.get('create_refund'), 1);
      assert.deepEqual(await h.effects(), ['refund o-2 100']);
    });

    it('no key sent: derived from the tool, the version and keyFields: a re-emitted call replays, other key fields run, another field mismatches', async () => {
      const { h, a } = await app();
      const first = await a.call('create_refund', { orderId: 'o-3', cents: 300 });
      const again = await a.call('create_refund', { orderId: 'o-3', cents: 300 });
      assert.equal(again._meta?.[REPLAYED_META], true);
      assert.deepEqual(unmarked(again), unmarked(first));
      assert.equal(a.runs.get('create_refund'), 1);
      await a.call('create_refund', { orderId: 'o-3', cents: 301 });
      assert.equal(a.runs.get('create_refund'), 2, 'another amount is another call');
      const noted = await a.call('create_refund', { orderId: 'o-3', cents: 300, note: 'changed' });
      assert.equal(noted._meta?.['dev.idem/code'], 'IDEM_KEY_MISMATCH', 'same key fields, other arguments');
      assert.deepEqual(await h.effects(), ['refund o-3 300', 'refund o-3 301']);
    });

    it('two principals sending the same key: two effects, neither sees the other’s result', async () => {
      const { h, a } = await app();
      const alice = await a.call('create_refund', { orderId: 'o-4', cents: 400 }, { key: 'shared', principal: 'alice' });
      const bob = await a.call('create_refund', { orderId: 'o-4', cents: 400 }, { key: 'shared', principal: 'bob' });
      assert.equal(bob._meta?.[REPLAYED_META], undefined, 'bob’s call is not a replay of alice’s');
      assert.notDeepEqual(bob.structuredContent, alice.structuredContent);
      assert.equal(a.runs.get('create_refund'), 2);
      assert.deepEqual(await h.effects(), ['refund o-4 400', 'refund o-4 400']);
      const aliceAgain = await a.call('create_refund', { orderId: 'o-4', cents: 400 }, { key: 'shared', principal: 'alice' });
      assert.deepEqual(unmarked(aliceAgain), unmarked(alice));
      // Derived keys are per principal too.
      await a.call('create_refund', { orderId: 'o-5', cents: 1 }, { principal: 'alice' });
      const bobDerived = await a.call('create_refund', { orderId: 'o-5', cents: 1 }, { principal: 'bob' });
      assert.equal(bobDerived._meta?.[REPLAYED_META], undefined);
      assert.equal(a.runs.get('create_refund'), 4);
    });

    it('a result JSON cannot encode (a bigint): fails closed, an error result stored in its place, the tool never run again', async () => {
      const { h, a } = await app();
      const first = await a.call('big_total', { day: 'd-1' }, { key: 'big' });
      assert.equal(first.isError, true);
      assert.equal(first._meta?.['dev.idem/code'], 'IDEM_TOOL_RESULT_UNENCODABLE');
      const again = await a.call('big_total', { day: 'd-1' }, { key: 'big' });
      assert.equal(again._meta?.['dev.idem/code'], 'IDEM_TOOL_RESULT_UNENCODABLE');
      assert.equal(again._meta?.[REPLAYED_META], true);
      assert.equal(a.runs.get('big_total'), 1, 'the claim was not freed for a rerun');
      assert.deepEqual(await h.effects(), ['total d-1']);
    });

    it('isError results: stored and replayed by default; with errorResults "release" returned, not stored, and run again', async () => {
      const { a } = await app();
      const stored = await a.call('declined_store', { id: 'c-1' }, { key: 'd-1' });
      const storedAgain = await a.call('declined_store', { id: 'c-1' }, { key: 'd-1' });
      assert.equal(stored.isError, true);
      assert.deepEqual(unmarked(storedAgain), unmarked(stored));
      assert.equal(a.runs.get('declined_store'), 1);
      const released = await a.call('declined_release', { id: 'c-1' }, { key: 'd-1' });
      const releasedAgain = await a.call('declined_release', { id: 'c-1' }, { key: 'd-1' });
      assert.equal(released.isError, true);
      assert.equal(releasedAgain._meta?.[REPLAYED_META], undefined);
      assert.notDeepEqual(releasedAgain.content, released.content);
      assert.equal(a.runs.get('declined_release'), 2);
    });

    it('the handler wrapper on registerTool: the key from a declared argument; idempotentHint set by idempotentTool unless the config says otherwise', async () => {
      const { h, a } = await app();
      const first = await a.call('send_mail', { requestId: 'r-1', to: 'ann@example.com' });
      const again = await a.call('send_mail', { requestId: 'r-1', to: 'ann@example.com' });
      assert.deepEqual(unmarked(again), unmarked(first));
      assert.equal(again._meta?.[REPLAYED_META], true);
      const other = await a.call('send_mail', { requestId: 'r-1', to: 'bob@example.com' });
      assert.equal(other._meta?.['dev.idem/code'], 'IDEM_KEY_MISMATCH');
      assert.deepEqual(await h.effects(), ['mail ann@example.com']);
      const tools = await a.listTools();
      assert.equal(tools.find((t) => t.name === 'create_refund')?.annotations?.idempotentHint, true);
      assert.equal(tools.find((t) => t.name === 'send_mail')?.annotations?.idempotentHint, false);
    });
  });
}

describe('idem/mcp over stdio: the server SIGKILLed mid-call, then restarted', { skip: !process.env.DATABASE_URL && 'needs DATABASE_URL' }, () => {
  const table = tableName('idem_mcp');
  let pool: pg.Pool;
  before(async () => {
    pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
    await new PostgresStore({ client: pool, table }).migrate();
    await pool.query(`CREATE TABLE "${table}_effects" (id serial PRIMARY KEY, note text NOT NULL)`);
  });
  after(async () => {
    await pool.query(`DROP TABLE IF EXISTS "${table}_effects"`);
    await pool.query(`DROP TABLE IF EXISTS "${table}_blobs"`);
    await pool.query(`DROP TABLE IF EXISTS "${table}"`);
    await pool.query(`DROP SEQUENCE IF EXISTS "${table}_lock_version_seq"`);
    await pool.end();
  });

  /** A Client connected to a fresh server process; resolves once the server says `ready`. */
  async function connect(env: Record<string, string>) {
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ['--import', 'tsx', fileURLToPath(new URL('./helpers/mcp-stdio-server.ts', import.meta.url))],
      cwd: ROOT,
      env: childEnv({ MCP_DATABASE_URL: process.env.DATABASE_URL!, MCP_TABLE: table, ...env }),
      stderr: 'pipe',
    });
    let stderr = '';
    const lines = new Set<() => void>();
    transport.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
      for (const l of lines) l();
    });
    const waitFor = (text: string) =>
      new Promise<void>((resolve) => {
        const check = () => stderr.includes(text) && (lines.delete(check), resolve());
        lines.add(check);
        check();
      });
    const client = new Client({ name: 'agent', version: '1.0.0' });
    await client.connect(transport);
    return { client, transport, waitFor };
  }

  it('the retry after the lease runs out resumes after the committed phase: each effect once in total', { timeout: 180_000 }, async () => {
    const first = await connect({ MCP_HANG: '1' });
    const call = { name: 'transfer', arguments: { id: 't-1' }, _meta: { [KEY_META]: 'transfer-t-1' } };
    const pending = first.client.callTool(call).then(
      () => 'answered',
      () => 'lost',
    );
    await first.waitFor('debit committed');
    process.kill(first.transport.pid!, 'SIGKILL');
    assert.equal(await pending, 'lost', 'the killed server never answered');
    await first.client.close().catch(() => undefined);

    const second = await connect({});
    try {
      let result = (await second.client.callTool(call)) as CallToolResult;
      // The dead server's lease still holds: the answer says when to come back.
      for (let i = 0; i < 10 && result._meta?.['dev.idem/code'] === 'IDEM_KEY_IN_PROGRESS'; i++) {
        await new Promise((resolve) => setTimeout(resolve, result._meta?.['dev.idem/retry-after-ms'] as number));
        result = (await second.client.callTool(call)) as CallToolResult;
      }
      assert.equal(result.isError, undefined, JSON.stringify(result));
      assert.match(textOf(result), new RegExp(`by pid ${second.transport.pid}`));
      const { rows } = await pool.query(`SELECT note FROM "${table}_effects" ORDER BY id`);
      assert.deepEqual(
        rows.map((r) => r.note),
        ['debit t-1', 'credit t-1'],
      );
      const replay = (await second.client.callTool(call)) as CallToolResult;
      assert.equal(replay._meta?.[REPLAYED_META], true);
      assert.deepEqual(unmarked(replay), unmarked(result));
    } finally {
      await second.client.close();
    }
  });
});
