/**
 * The PostgreSQL clients of the connection-fault contract, each configured as
 * docs/connection-faults.md says: a pg `Pool`, postgres.js, and Drizzle, Kysely and Prisma over
 * them. Every entry's timers are short (idle connections end after about a second) so the idle
 * fault takes seconds; the documented configuration names the production values.
 */
import net from 'node:net';
import pg from 'pg';
import { PostgresStore, type PostgresStoreOptions } from '../../../src/postgres/index.js';
import type { SqlClient, SqlDriver } from '../../../src/postgres/client.js';
import type { Endpoint, FaultEntry, OpenContext, OpenedStore } from './entry.js';

const IDLE_TIMEOUT_MS = 1000;
/** Longer than the idle timeout (an idle connection ends cleanly first) and than any statement of the service. */
const SOCKET_TIMEOUT_MS = 2 * IDLE_TIMEOUT_MS;

/** `socket`, destroyed once it has seen no byte either way for `ms` (a silent connection, or a silent server). */
function quietSocketEnds(socket: net.Socket, ms: number): net.Socket {
  socket.setTimeout(ms, () => socket.destroy(new Error(`no byte from the database for ${ms} ms`)));
  return socket;
}

/** The database of DATABASE_URL, and its URL with the host and port of `to`. */
function database(): URL {
  return new URL(process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test');
}
function server(): Endpoint {
  const url = database();
  return { host: url.hostname, port: Number(url.port || 5432) };
}
function urlVia(ctx: OpenContext): string {
  const url = database();
  const to = ctx.via(server());
  url.hostname = to.host;
  url.port = String(to.port);
  return url.toString();
}

/**
 * A pg Pool as the documented configuration has it: an 'error' listener, a short idle timeout.
 * Under a driver (`forDriver`) its sockets also end after {@link SOCKET_TIMEOUT_MS} with no
 * byte either way: the driver's own statements (its BEGIN) have no deadline of idem's, and one
 * stuck on a connection that went silent would hold its pool slot for good (a `query_timeout`
 * does not free it: node-postgres hands the connection back with the statement still on it).
 */
function pool(ctx: OpenContext, forDriver = false): pg.Pool {
  const p = new pg.Pool({
    connectionString: urlVia(ctx),
    max: 5,
    idleTimeoutMillis: IDLE_TIMEOUT_MS,
    keepAlive: true,
    ...(forDriver && { stream: () => quietSocketEnds(new net.Socket(), SOCKET_TIMEOUT_MS) }),
  });
  p.on('error', (error) => console.error(`idle database connection lost: ${error.message}`));
  return p;
}

/** The store on `client`, migrated through the proxy (forwarding at start). */
async function migrated<Tx>(
  ctx: OpenContext,
  client: SqlClient | SqlDriver<Tx>,
  close: () => Promise<void>,
  options: Partial<PostgresStoreOptions<Tx>> = {},
): Promise<OpenedStore> {
  const store = new PostgresStore<Tx>({ ...options, client: client as never, table: ctx.name, storeTimeoutMs: ctx.storeTimeoutMs });
  await store.migrate();
  return { store, close };
}

/** Drops the run's tables on a direct connection. */
async function dropTables(name: string): Promise<void> {
  const direct = new pg.Client({ connectionString: database().toString() });
  await direct.connect();
  try {
    for (const suffix of ['_blobs', '_outbox', '']) await direct.query(`DROP TABLE IF EXISTS "${name}${suffix}" CASCADE`);
  } finally {
    await direct.end();
  }
}

function entry(name: string, open: (ctx: OpenContext) => Promise<OpenedStore>): FaultEntry {
  return {
    name,
    needs: 'DATABASE_URL',
    servers: () => [server()],
    idleMs: IDLE_TIMEOUT_MS * 3,
    open,
    cleanup: dropTables,
  };
}

/** postgres.js as documented: short idle timeout, a connect timeout. */
async function postgresJs(ctx: OpenContext) {
  const { default: postgres } = await import('postgres');
  return postgres(urlVia(ctx), { max: 5, idle_timeout: IDLE_TIMEOUT_MS / 1000, connect_timeout: 2, onnotice: () => undefined });
}

/** The PostgreSQL entries, in the order the contract runs them. */
export const postgresEntries: FaultEntry[] = [
  entry('pg Pool', async (ctx) => {
    const p = pool(ctx);
    return migrated(ctx, p, () => p.end());
  }),
  entry('pg Pool with groupCommit', async (ctx) => {
    const p = pool(ctx);
    return migrated(ctx, p, () => p.end(), { groupCommit: true });
  }),
  entry('postgres.js', async (ctx) => {
    const { postgresjs } = await import('../../../src/postgresjs/index.js');
    const sql = await postgresJs(ctx);
    return migrated(ctx, postgresjs(sql), () => sql.end({ timeout: 1 }));
  }),
  entry('Drizzle on pg Pool', async (ctx) => {
    const { drizzle: onNodePostgres } = await import('drizzle-orm/node-postgres');
    const { drizzle } = await import('../../../src/drizzle/index.js');
    const p = pool(ctx, true);
    return migrated(ctx, drizzle(onNodePostgres(p)), () => p.end());
  }),
  entry('Drizzle on postgres.js', async (ctx) => {
    const { drizzle: onPostgresJs } = await import('drizzle-orm/postgres-js');
    const { drizzle } = await import('../../../src/drizzle/index.js');
    const sql = await postgresJs(ctx);
    return migrated(ctx, drizzle(onPostgresJs(sql)), () => sql.end({ timeout: 1 }));
  }),
  entry('Kysely on pg Pool', async (ctx) => {
    const { Kysely, PostgresDialect } = await import('kysely');
    const { kysely } = await import('../../../src/kysely/index.js');
    const p = pool(ctx, true);
    // Kysely checks connections out of the pool itself and gives them no 'error' listener: a
    // socket that ends while Kysely holds one would end the process (docs/connection-faults.md).
    p.on('connect', (client) => client.on('error', () => undefined));
    const db = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: p }) });
    return migrated(ctx, kysely(db), () => db.destroy());
  }),
  entry('Prisma on pg Pool', async (ctx) => {
    const { PrismaPg } = await import('@prisma/adapter-pg');
    const { prisma } = await import('../../../src/prisma/index.js');
    const { generatePrismaClient } = await import('../../helpers/prisma/generate.js');
    generatePrismaClient();
    const { PrismaClient } = await import('../../helpers/prisma/generated/client.js');
    const p = pool(ctx, true);
    const db = new PrismaClient({ adapter: new PrismaPg(p) });
    return migrated(ctx, prisma(db), async () => {
      await db.$disconnect();
      await p.end();
    });
  }),
];
