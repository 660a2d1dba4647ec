/**
 * The Citus entry of the store factory list (test/helpers/stores.ts): PostgresStore in Citus
 * mode (`distributed: 'citus'`) through the coordinator at CITUS_URL, each fresh table
 * distributed by scope after `migrate()` (`store.distribute()`, with `<table>_blobs`
 * co-located). Without CITUS_URL there is no entry, and {@link citusNotice} says so once per
 * file. docs/citus.md starts a cluster.
 */
import { test } from 'node:test';
import pg from 'pg';
import type { PostgresStore, PostgresStoreOptions } from '../../src/postgres/index.js';
import type { Queryable, SqlClient } from '../../src/postgres/client.js';
import type { PostgresClient, StoreFactory } from './stores.js';

/** The coordinator's URL, e.g. postgres://postgres@127.0.0.1:9700/postgres, or undefined. */
export const CITUS_URL = process.env.CITUS_URL;

/** `postgresFactory` of stores.ts, passed in so that this file imports nothing of it at run time. */
type PostgresFactory = (
  name: string,
  open: () => Promise<PostgresClient<Queryable>>,
  partitioned: boolean,
  contractOnly?: boolean,
  options?: Partial<PostgresStoreOptions<Queryable>>,
  prepare?: (store: PostgresStore<Queryable>) => Promise<unknown>,
) => StoreFactory;

/** A pool on the coordinator. */
export async function openCitus(): Promise<PostgresClient<Queryable>> {
  const pool = new pg.Pool({ connectionString: CITUS_URL, max: 20 });
  const client = pool as SqlClient;
  return {
    client,
    raw: client,
    sql: client,
    insert: async (tx, side, note) => void (await tx.query(`INSERT INTO "${side}" (note) VALUES ($1)`, [note])),
    inTx: (tx, text, params) => tx.query(text, params),
    close: () => pool.end(),
  };
}

/** The Citus store entries: none without CITUS_URL. */
export function citusFactories(postgresFactory: PostgresFactory): StoreFactory[] {
  if (!CITUS_URL) return [];
  return [postgresFactory('PostgresStore (Citus, distributed by scope)', openCitus, false, false, { distributed: 'citus' }, (store) => store.distribute())];
}

/** Registers one skipped test naming why the Citus entry did not run (call at a file's top level). */
export function citusNotice(): void {
  if (!CITUS_URL) test('Citus', { skip: 'CITUS_URL is not set: the Citus store entry was not run (docs/citus.md starts a cluster)' }, () => undefined);
}
