/**
 * The gateway embedded in a Node process (docs/guides/gateway.md): the same proxy as `idem
 * gateway`, on a PostgreSQL pool the process already has, in front of a service in any language.
 */
import pg from 'pg';
import { createGateway } from 'idem/gateway';
import { PostgresStore } from 'idem/postgres';

// #region embed
export async function startGateway(databaseUrl: string, upstream: string, listen = ':8080', table = 'idempotency_keys') {
  const pool = new pg.Pool({ connectionString: databaseUrl });
  const store = new PostgresStore({ client: pool, table });
  await store.migrate();
  const gateway = createGateway({
    store,
    config: {
      upstream, // e.g. http://127.0.0.1:8000, your FastAPI, Flask or Go service
      listen,
      principal: { hash: 'authorization' }, // each API credential is its own scope
      routes: [{ path: '/v1/*', methods: ['POST', 'PATCH'], required: true }],
    },
    log: (entry) => console.log(JSON.stringify(entry)),
  });
  const url = await gateway.listen();
  const stop = () => gateway.close().then(() => pool.end());
  process.once('SIGTERM', stop); // drains in-flight requests, then closes the pool
  return { url, stop };
}
// #endregion embed
