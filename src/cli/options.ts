/**
 * What the `idem` commands share: the connection options, option parsers (durations with a
 * unit, whole numbers), opening the store on the table as it exists, and the output sink.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import ms from 'ms';
import { DEFAULT_RETENTION_MS } from '../core/constants.js';
import { PostgresStore } from '../postgres/index.js';
import { statements } from '../postgres/sql.js';
import { CliError, type CliDatabase, DEFAULT_DATA_DIR, describeError, openDatabase } from './database.js';
import type { CliStore } from './store.js';

/** Options every command takes. */
export interface ConnectionOptions {
  databaseUrl?: string;
  dataDir?: string;
  table: string;
  partitioned?: boolean;
  /** `migrate --distribute`: Citus mode, and distribute the tables by scope. */
  distribute?: boolean;
  json?: boolean;
}

/** Where output goes; tests and embedders may replace it. */
export interface CliIo {
  out(line: string): void;
  err(line: string): void;
  /** The stream the progress bar draws on, and whether it is a terminal. */
  progressStream: NodeJS.WriteStream;
}

export const defaultIo: CliIo = {
  out: (line) => process.stdout.write(line + '\n'),
  err: (line) => process.stderr.write(line + '\n'),
  progressStream: process.stderr,
};

/**
 * A duration with its unit, as `ms` reads it: `500ms`, `30s`, `15m`, `24h`, `7d`. A bare
 * number is refused: the unit is always said.
 */
export function duration(name: string) {
  return (value: string): number => {
    const parsed = /^\s*\d+(\.\d+)?\s*[a-z]+\s*$/i.test(value) ? ms(value as ms.StringValue) : undefined;
    if (typeof parsed !== 'number' || !Number.isFinite(parsed) || parsed < 0) {
      throw new InvalidArgumentError(`${name} takes a duration with a unit, e.g. 500ms, 30s, 15m, 24h, 7d (got ${JSON.stringify(value)})`);
    }
    return parsed;
  };
}

export function positiveInteger(name: string) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < 1) {
      throw new InvalidArgumentError(`${name} must be a whole number >= 1 (got ${JSON.stringify(value)})`);
    }
    return n;
  };
}

/** Adds the connection options to a command. */
export function withConnection(command: Command): Command {
  return command
    .addOption(new Option('--database-url <url>', 'PostgreSQL URL; without it, embedded PGlite in --data-dir').env('DATABASE_URL'))
    .addOption(new Option('--data-dir <dir>', 'PGlite data directory, used when no database URL is given').env('IDEM_DATA_DIR').default(DEFAULT_DATA_DIR))
    .addOption(new Option('--table <name>', 'key table, optionally schema.table').default('idempotency_keys'))
    .option('--json', 'print the result as one JSON object');
}

export function retentionOption(): Option {
  return new Option('--retention <duration>', 'rows older than this are past retention (e.g. 24h, 7d)')
    .default(DEFAULT_RETENTION_MS, '24h')
    .argParser(duration('--retention'));
}

/**
 * Opens the database and the store; the store's mode follows the table as it exists
 * (partitioned, plain, or distributed by Citus), so only `migrate` needs `--partitioned` or
 * `--distribute`.
 */
export async function withStore<T>(
  options: ConnectionOptions,
  run: (store: CliStore, db: CliDatabase) => Promise<T>,
  opts: { mustExist?: boolean; daysAhead?: number } = { mustExist: true },
): Promise<T> {
  try {
    statements(options.table);
  } catch (error) {
    throw new CliError(`--table: ${describeError(error)}`);
  }
  const db = await openDatabase({ databaseUrl: options.databaseUrl, dataDir: options.dataDir });
  try {
    if (db.kind === 'mysql') return await run(await mysqlStore(options, db, opts.mustExist !== false), db);
    let store = new PostgresStore({ client: db.client, table: options.table });
    const mode = await store.tableMode();
    if (opts.mustExist !== false && mode === undefined) {
      throw new CliError(`table ${options.table} does not exist in ${db.location}: run \`idem migrate\` first`);
    }
    const partitioned = options.partitioned || mode === 'partitioned';
    // A table Citus distributes is opened in Citus mode (per-shard sweep, its own statements).
    if (options.distribute || (mode !== undefined && (await store.distribution()) === 'citus')) {
      if (partitioned) throw new CliError('--distribute: a partitioned table cannot be distributed by idem (distribute a plain table)');
      store = new PostgresStore({ client: db.client, table: options.table, distributed: 'citus' });
    } else if (partitioned) {
      store = new PostgresStore({
        client: db.client,
        table: options.table,
        partitioned: opts.daysAhead === undefined ? true : { daysAhead: opts.daysAhead },
      });
    }
    return await run(store, db);
  } finally {
    await db.close().catch(() => undefined);
  }
}

/**
 * The MySQL store of a `mysql://` URL: a {@link CliStore} like `PostgresStore` (it declares the
 * operator and maintenance capabilities), with no partitioned or Citus mode, so the commands run
 * on it as on a plain PostgreSQL table.
 * @throws {CliError} for `--partitioned`, `--distribute`, or a table that does not exist when it must
 */
async function mysqlStore(options: ConnectionOptions, db: CliDatabase, mustExist: boolean): Promise<CliStore> {
  if (options.partitioned || options.distribute) throw new CliError('--partitioned and --distribute are PostgreSQL modes; MySQL tables are plain');
  const { MySqlStore } = await import('../mysql/index.js');
  if (!db.mysql) throw new CliError(`${db.location} is not a MySQL server`);
  const store: CliStore = new MySqlStore({ client: db.mysql, table: options.table });
  if (mustExist && (await store.tableMode()) === undefined) {
    throw new CliError(`table ${options.table} does not exist in ${db.location}: run \`idem migrate\` first`);
  }
  return store;
}

export const iso = (d: Date | null | undefined) => (d ? d.toISOString() : '-');
export const count = (n: number) => n.toLocaleString('en-US');

/** Resolves on the first SIGINT or SIGTERM (a long-running command's stop: Ctrl-C, a supervisor). */
export function untilStopped(): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
}
