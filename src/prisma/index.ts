/**
 * `idem/prisma`: the PostgreSQL store on a Prisma client. A phase's `tx` is Prisma's
 * interactive transaction client (what `prisma.$transaction(async (tx) => …)` hands out), and
 * idem's fenced recovery-point write runs in that same transaction (protocol.md K4, K5, Q4),
 * so a phase's `tx.charge.create(...)` commits with its recovery point or not at all.
 *
 * Prisma is an optional peer dependency: this module never imports it; it uses the client it
 * is given, through the slice of its API declared below (`$queryRawUnsafe`,
 * `$executeRawUnsafe`, `$transaction`). Prisma 7 with a driver adapter (`@prisma/adapter-pg`)
 * runs without any engine binary; the README ("Prisma") shows the setup.
 *
 * @example
 * ```ts
 * import { PrismaPg } from '@prisma/adapter-pg';
 * import { PrismaClient } from './generated/prisma/client.js';
 * import { prisma } from 'idem/prisma';
 *
 * const client = new PrismaClient({ adapter: new PrismaPg({ connectionString }) });
 * const store = new PostgresStore({ client: prisma(client) });
 * // in a handler: idem.phase('charge', (tx) => tx.charge.create({ data }))
 * ```
 */
import { type Queryable, type QueryResultLike, SQL_DRIVER, type SqlDriver } from '../postgres/client.js';
import { nodePostgresValue } from '../postgres/values.js';

/** The slice of a Prisma client or transaction client that runs raw SQL. */
export interface PrismaRawLike {
  $queryRawUnsafe(query: string, ...values: unknown[]): PromiseLike<unknown>;
  $executeRawUnsafe(query: string, ...values: unknown[]): PromiseLike<number>;
}

/** Prisma's options of an interactive transaction (times in ms). */
export interface PrismaTransactionOptions {
  /** Longest wait for a connection. @default 2000 (Prisma's default) */
  maxWait?: number;
  /** Longest run of the whole transaction, the phase's effects included. @default 5000 (Prisma's default) */
  timeout?: number;
  /** e.g. `'ReadCommitted'` (idem needs nothing stricter). @default the database's default */
  isolationLevel?: string;
}

/** The slice of a `PrismaClient` that idem uses; `Tx` is its interactive transaction client. */
export interface PrismaLike<Tx extends PrismaRawLike> extends PrismaRawLike {
  $transaction<R>(fn: (tx: Tx) => Promise<R>, options?: PrismaTransactionOptions): PromiseLike<R>;
}

/** Options of {@link prisma}. */
export interface PrismaDriverOptions {
  /** Passed to each `$transaction` idem opens for a phase or a finish. @default Prisma's defaults */
  transaction?: PrismaTransactionOptions;
}

/** Statements that return rows (run with `$queryRawUnsafe`); others report a count (`$executeRawUnsafe`). */
const RETURNS_ROWS = /^\s*(select|with|values|table|show)\b|\breturning\b/i;

/**
 * A SELECT of an advisory lock (idem's migrate and partitioned claim take one): its column is
 * `void`, which Prisma's raw query cannot read ("Failed to deserialize column of type 'void'"),
 * so it runs with `$executeRawUnsafe`; its (empty) result is not used.
 */
const VOID_LOCK = /^\s*select\s+pg_advisory(_xact)?_lock(_shared)?\s*\(/i;

/** Runs `text` on `db` with Prisma's result as `{ rows, rowCount }`. */
async function run(db: PrismaRawLike, text: string, params: unknown[] = []): Promise<QueryResultLike> {
  if (!RETURNS_ROWS.test(text) || VOID_LOCK.test(text)) {
    const count = await db.$executeRawUnsafe(text, ...params);
    return { rows: [], rowCount: count };
  }
  const rows = (await db.$queryRawUnsafe(text, ...params)) as Array<Record<string, unknown>>;
  for (const row of rows) for (const name in row) row[name] = nodePostgresValue(row[name]); // Prisma's bigint and Decimal as node-postgres's text
  return { rows, rowCount: rows.length };
}

/**
 * The driver for `new PostgresStore({ client: prisma(client) })`: idem's statements through
 * `$queryRawUnsafe` / `$executeRawUnsafe` (parameters bound, never interpolated), a phase's
 * transaction through `client.$transaction(async (tx) => …)`, whose transaction client the
 * phase gets as `tx`. No `listen`: `notify: true` (wait mode) needs a `pg.Pool` or PGlite client.
 *
 * @param client a `PrismaClient` on PostgreSQL (with a driver adapter such as `@prisma/adapter-pg`)
 * @returns a driver whose transaction type is Prisma's transaction client
 * @throws {TypeError} when `client` has no `$queryRawUnsafe`, `$executeRawUnsafe` and `$transaction`
 */
export function prisma<Tx extends PrismaRawLike>(client: PrismaLike<Tx>, options: PrismaDriverOptions = {}): SqlDriver<Tx> {
  const valid =
    client && ['$queryRawUnsafe', '$executeRawUnsafe', '$transaction'].every((m) => typeof (client as unknown as Record<string, unknown>)[m] === 'function');
  if (!valid) throw new TypeError('idem/prisma: pass a PrismaClient (new PrismaClient({ adapter }))');
  const txOptions = options.transaction;
  return {
    kind: SQL_DRIVER,
    name: 'Prisma',
    query: (text, params) => run(client, text, params),
    transaction: <T>(fn: (tx: Tx, sql: Queryable) => Promise<T>) =>
      Promise.resolve(client.$transaction((tx) => fn(tx, { query: (text, params) => run(tx, text, params) }), txOptions)),
  };
}
