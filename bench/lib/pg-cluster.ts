/**
 * Local PostgreSQL instances for replication experiments: a primary and a streaming standby
 * (pg_basebackup -R), each in its own temporary data directory on a free loopback port,
 * started with the server binaries (PG_BIN, default /usr/lib/postgresql/15/bin). The standby
 * streams from the primary through a {@link SilentProxy}, so an experiment can make it fall
 * behind. When run as root the servers run as the `postgres` user (PostgreSQL refuses root).
 */
import { execFile } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync, appendFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { startSilentProxy, type SilentProxy } from '../../test/helpers/silent-proxy.js';

const run = promisify(execFile);
/** Where the PostgreSQL server binaries are (PG_BIN). */
export const PG_BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin';

/** True when the PostgreSQL server binaries are there. */
export function haveServerBinaries(): boolean {
  return existsSync(join(PG_BIN, 'initdb')) && existsSync(join(PG_BIN, 'pg_basebackup'));
}

/** A free loopback TCP port (bound, then released). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** uid/gid of the `postgres` user when this process is root, else undefined. */
async function serverUser(): Promise<{ uid: number; gid: number } | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
  return { uid, gid };
}

async function pgTool(tool: string, args: string[], user: { uid: number; gid: number } | undefined): Promise<string> {
  const { stdout } = await run(join(PG_BIN, tool), args, { ...(user ?? {}), env: { ...process.env, LC_ALL: 'C' }, maxBuffer: 16 * 1024 * 1024 });
  return stdout;
}

/** One running server: its port, data directory and how to stop it. */
export interface Instance {
  port: number;
  dir: string;
  url(database?: string): string;
  /** `pg_ctl stop -m immediate`: a crash, no shutdown checkpoint, no last WAL sent. */
  crash(): Promise<void>;
  stop(): Promise<void>;
}

/** A primary and its streaming standby, linked through a proxy that can go silent. */
export interface Cluster {
  primary: Instance;
  standby: Instance;
  /** Between the standby and the primary: `silent` makes the standby fall behind. */
  link: SilentProxy;
  /** Sets synchronous_standby_names on the primary ('' async, 'standby1' sync) and reloads. */
  setSynchronous(sync: boolean): Promise<void>;
  /** Promotes the standby and resolves once it accepts writes. */
  promote(): Promise<void>;
  /** Stops everything and removes the data directories. */
  destroy(): Promise<void>;
}

function instance(dir: string, port: number, user: { uid: number; gid: number } | undefined): Instance {
  const ctl = (args: string[]) => pgTool('pg_ctl', ['-D', dir, '-w', '-t', '60', ...args], user);
  let stopped = false;
  return {
    port,
    dir,
    url: (database = 'postgres') => `postgres://postgres@127.0.0.1:${port}/${database}`,
    async crash() {
      if (stopped) return;
      stopped = true;
      await ctl(['stop', '-m', 'immediate']).catch(() => undefined);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await ctl(['stop', '-m', 'fast']).catch(() => undefined);
    },
  };
}

/** Waits until `url` answers `sql` with a truthy first column. */
async function until(url: string, sql: string, timeoutMs: number, what: string): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2000 });
    try {
      await client.connect();
      const { rows } = await client.query(sql);
      if (Object.values(rows[0] ?? {})[0]) return;
    } catch {
      // not up yet
    } finally {
      await client.end().catch(() => undefined);
    }
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Starts a primary and one streaming standby (application_name `standby1`), asynchronous
 * unless `sync`. Resolves once the standby streams.
 */
export async function startCluster(options: { sync: boolean }): Promise<Cluster> {
  const user = await serverUser();
  const root = mkdtempSync(join(tmpdir(), 'idem-repl-'));
  if (user) chownSync(root, user.uid, user.gid);
  const primaryDir = join(root, 'primary');
  const standbyDir = join(root, 'standby');
  const primaryPort = await freePort();
  const standbyPort = await freePort();
  await pgTool('initdb', ['-D', primaryDir, '-U', 'postgres', '--auth=trust', '--no-sync'], user);
  appendFileSync(
    join(primaryDir, 'postgresql.conf'),
    [
      `port = ${primaryPort}`,
      `listen_addresses = '127.0.0.1'`,
      `unix_socket_directories = '${root}'`,
      `wal_level = replica`,
      `max_wal_senders = 5`,
      `wal_keep_size = '256MB'`,
      `synchronous_commit = on`,
      `synchronous_standby_names = '${options.sync ? 'standby1' : ''}'`,
      `fsync = off`,
      `shared_buffers = '32MB'`,
      '',
    ].join('\n'),
  );
  appendFileSync(join(primaryDir, 'pg_hba.conf'), 'host replication all 127.0.0.1/32 trust\n');
  const primary = instance(primaryDir, primaryPort, user);
  const link = await startSilentProxy({ host: '127.0.0.1', port: primaryPort });
  let standby: Instance | undefined;
  const destroy = async () => {
    await standby?.crash();
    await primary.crash();
    await link.close();
    rmSync(root, { recursive: true, force: true });
  };
  try {
    await pgTool('pg_ctl', ['-D', primaryDir, '-w', '-t', '60', '-l', join(root, 'primary.log'), 'start'], user);
    await pgTool('pg_basebackup', ['-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres', '-D', standbyDir, '-R', '-X', 'stream', '--no-sync'], user);
    // Stream through the proxy, under the name synchronous_standby_names refers to.
    writeFileSync(join(standbyDir, 'postgresql.auto.conf'), `primary_conninfo = 'host=127.0.0.1 port=${link.port} user=postgres application_name=standby1'\n`);
    appendFileSync(join(standbyDir, 'postgresql.conf'), `port = ${standbyPort}\nhot_standby = on\n`);
    standby = instance(standbyDir, standbyPort, user);
    await pgTool('pg_ctl', ['-D', standbyDir, '-w', '-t', '60', '-l', join(root, 'standby.log'), 'start'], user);
    await until(primary.url(), `SELECT count(*) > 0 FROM pg_stat_replication WHERE state = 'streaming'`, 30_000, 'the standby to stream');
  } catch (error) {
    await destroy();
    throw error;
  }
  const s = standby;
  return {
    primary,
    standby: s,
    link,
    async setSynchronous(sync) {
      const client = new pg.Client({ connectionString: primary.url() });
      await client.connect();
      try {
        await client.query(`ALTER SYSTEM SET synchronous_standby_names = '${sync ? 'standby1' : ''}'`);
        await client.query('SELECT pg_reload_conf()');
      } finally {
        await client.end();
      }
      const want = sync ? 'sync' : 'async';
      await until(primary.url(), `SELECT count(*) > 0 FROM pg_stat_replication WHERE sync_state = '${want}'`, 15_000, `the standby to be ${want}`);
    },
    async promote() {
      await pgTool('pg_ctl', ['-D', standbyDir, '-w', '-t', '60', 'promote'], user);
      await until(s.url(), 'SELECT NOT pg_is_in_recovery()', 30_000, 'the promoted standby to accept writes');
    },
    destroy,
  };
}
