/**
 * The gateway embedded in a Node process (docs/guides/gateway.md): the same proxy as `idem
 * gateway`, on a PostgreSQL pool the process already has, in front of a service in any language.
 */
import pg from 'pg';
import { createGateway } from 'idem/gateway';
import { PostgresStore } from 'idem/postgres';

// #region embed
export async function startGateway(databaseUrl: string, upstream: string) {
  const pool = new pg.Pool({ connectionString: databaseUrl });
  const store = new PostgresStore({ client: pool });
  await store.migrate();
  const gateway = createGateway({
    store,
    config: {
      upstream, // e.g. http://127.0.0.1:8000, your FastAPI, Flask or Go service
      listen: ':8080',
      principal: { hash: 'authorization' }, // each API credential is its own scope
      routes: [{ path: '/v1/*', methods: ['POST', 'PATCH'], required: true }],
    },
    log: (entry) => console.log(JSON.stringify(entry)),
  });
  const url = await gateway.listen();
  process.once('SIGTERM', () => void gateway.close().then(() => pool.end()));
  return url;
}
// #endregion embed
