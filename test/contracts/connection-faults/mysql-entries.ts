/**
 * The mysql2 pool in the connection-fault contract (test/connection-faults.test.ts), configured
 * as docs/guides/mysql.md says: a connect timeout, idle connections closed after a short
 * idle timeout (here about a second, so the idle fault takes seconds), TCP keepalive. Each run
 * gets a database of its own, named after the run and dropped by `cleanup`.
 */
import mysql from 'mysql2/promise';
import { MySqlStore } from '../../../src/mysql/index.js';
import type { Endpoint, FaultEntry } from './entry.js';

const IDLE_TIMEOUT_MS = 1000;

function url(): URL {
  return new URL(process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test');
}
function server(): Endpoint {
  return { host: url().hostname, port: Number(url().port || 3306) };
}

export const mysqlEntries: FaultEntry[] = [
  {
    name: 'mysql2 Pool',
    needs: 'MYSQL_URL',
    servers: () => [server()],
    idleMs: IDLE_TIMEOUT_MS * 3,
    async open(ctx) {
      const to = ctx.via(server());
      const base = url();
      const admin = await mysql.createConnection({
        host: to.host,
        port: to.port,
        user: decodeURIComponent(base.username),
        password: decodeURIComponent(base.password),
      });
      await admin.query(`CREATE DATABASE IF NOT EXISTS \`${ctx.name}\``);
      await admin.end();
      const pool = mysql.createPool({
        host: to.host,
        port: to.port,
        user: decodeURIComponent(base.username),
        password: decodeURIComponent(base.password),
        database: ctx.name,
        connectionLimit: 5,
        connectTimeout: 2000,
        idleTimeout: IDLE_TIMEOUT_MS,
        maxIdle: 0,
        enableKeepAlive: true,
      });
      const store = new MySqlStore({ client: pool, storeTimeoutMs: ctx.storeTimeoutMs });
      await store.migrate();
      return { store, close: () => pool.end() };
    },
    async cleanup(name) {
      const admin = await mysql.createConnection(url().toString());
      try {
        await admin.query(`DROP DATABASE IF EXISTS \`${name}\``);
      } finally {
        await admin.end();
      }
    },
  },
];
