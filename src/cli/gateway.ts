/**
 * `idem gateway`: the reverse proxy of `idem/gateway` as a command (docs/guides/gateway.md).
 * Flags override the config file's fields. A bad configuration prints `error: <field> ...` and
 * exits 2, so a deploy script can tell "fix the file" from "the store is down" (exit 1).
 */
import { Option, type Command } from 'commander';
import { GatewayConfigError, loadGatewayConfig, parseGatewayConfig } from '../gateway/config.js';
import type { IdempotencyStore } from '../store/types.js';
import { CliError, describeError, openDatabase } from './database.js';
import { cliTelemetry } from './operator-commands.js';
import { type CliIo, untilStopped } from './options.js';

/** Exit code of a configuration the gateway refuses. */
export const CONFIG_EXIT_CODE = 2;

interface GatewayFlags {
  config?: string;
  upstream?: string;
  store?: string;
  listen?: string;
  table?: string;
}

/** Adds `gateway` to the program. */
export function addGatewayCommand(program: Command, io: CliIo): void {
  program
    .command('gateway')
    .description('run a reverse proxy that gives an upstream in any language durable, fenced, per-principal idempotency keys')
    .option('--config <file>', 'configuration file (JSON, or YAML when it ends in .yaml/.yml): routes, principal, limits')
    .option('--upstream <url>', 'base URL requests are forwarded to (overrides the file)')
    .addOption(new Option('--store <url>', 'postgres://, mysql://, redis:// URL, or memory (overrides the file)').env('IDEM_GATEWAY_STORE'))
    .option('--listen <address>', '[host]:port to listen on, e.g. :8080 (overrides the file)')
    .option('--table <name>', 'key table (SQL stores; overrides the file)')
    .action(async (flags: GatewayFlags) => {
      const raw: Record<string, unknown> = flags.config ? await loadGatewayConfig(flags.config) : {};
      for (const name of ['upstream', 'store', 'listen', 'table'] as const) if (flags[name] !== undefined) raw[name] = flags[name];
      if (raw.routes === undefined && !flags.config) throw new GatewayConfigError('routes', 'are not set: give --config <file> with at least one route');
      const { createGateway } = await import('../gateway/gateway.js');

      const config = parseGatewayConfig(raw);
      if (!config.store) throw new GatewayConfigError('store', 'is not set: give --store postgres://… (or memory) or store in the file');
      const { store, close } = await openStore(config.store, config.table);
      const log = (entry: Record<string, unknown>) => io.err(JSON.stringify({ time: new Date().toISOString(), ...entry }));
      const telemetry = await cliTelemetry(); // spans and metrics when @opentelemetry/api and an SDK are there
      const gateway = createGateway({ config, store, log, ...(telemetry ? { telemetry } : {}) });
      let url: string;
      try {
        url = await gateway.listen();
      } catch (error) {
        await close();
        throw new CliError(`cannot listen on ${config.listen}: ${describeError(error)}`);
      }
      io.out(`idem gateway listening on ${url}, forwarding to ${config.upstream} (${config.routes.length} route${config.routes.length === 1 ? '' : 's'})`);
      await untilStopped();
      io.out('idem gateway: draining in-flight requests');
      await gateway.close();
      await close();
      io.out('idem gateway stopped');
    });
}

/** The store of `--store`: memory, or a SQL store on the table (created when absent). */
async function openStore(url: string, table: string): Promise<{ store: IdempotencyStore; close: () => Promise<void> }> {
  if (url === 'memory') {
    const { MemoryStore } = await import('../memory/index.js');
    return { store: new MemoryStore() as IdempotencyStore, close: async () => undefined };
  }
  if (/^rediss?:\/\//i.test(url)) return openRedis(url, table);
  if (!/^(postgres|postgresql|mysql|mariadb):\/\//i.test(url)) {
    throw new GatewayConfigError(
      'store',
      `must be a postgres://, postgresql://, mysql://, mariadb:// or redis:// URL, or memory (got ${JSON.stringify(url.split(':')[0])}://…)`,
    );
  }
  const db = await openDatabase({ databaseUrl: url });
  try {
    if (db.kind === 'mysql') {
      const { MySqlStore } = await import('../mysql/index.js');
      const store = new MySqlStore({ client: db.mysql!, table });
      await store.migrate();
      return { store: store as unknown as IdempotencyStore, close: () => db.close() };
    }
    const { PostgresStore } = await import('../postgres/index.js');
    const store = new PostgresStore({ client: db.client, table });
    await store.migrate();
    return { store: store as unknown as IdempotencyStore, close: () => db.close() };
  } catch (error) {
    await db.close().catch(() => undefined);
    throw new CliError(`cannot prepare the key table ${table}: ${describeError(error)}`);
  }
}

/** `--store redis://…`: a RedisStore on node-redis (`@redis/client`, an optional peer), its keys under the table name as prefix. */
async function openRedis(url: string, prefix: string): Promise<{ store: IdempotencyStore; close: () => Promise<void> }> {
  let redis: {
    createClient(options: { url: string }): { connect(): Promise<unknown>; close(): Promise<void>; on(event: 'error', listener: (e: Error) => void): unknown };
  };
  try {
    redis = (await import('@redis/client')) as unknown as typeof redis;
  } catch {
    throw new CliError('--store redis:// needs the package @redis/client: npm install @redis/client');
  }
  const client = redis.createClient({ url });
  // A dropped connection is the store unavailable (503) per request, not a crash of the gateway.
  client.on('error', () => undefined);
  try {
    await client.connect();
  } catch (error) {
    throw new CliError(`cannot connect to Redis at ${new URL(url).host}: ${describeError(error)}`);
  }
  const { RedisStore } = await import('../redis/index.js');
  return { store: new RedisStore({ client: client as never, prefix }) as IdempotencyStore, close: () => client.close() };
}
