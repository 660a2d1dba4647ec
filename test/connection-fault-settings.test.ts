/**
 * Client settings that the connection-fault contract (test/connection-faults.test.ts) showed
 * unrecoverable are refused up front (protocol.md H23, docs/connection-faults.md). No server:
 * the clients here never connect.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { drizzle as onPostgresJs } from 'drizzle-orm/postgres-js';
import postgres from 'postgres';
import { InvalidOptionError } from '../src/core/errors.js';
import { drizzle } from '../src/drizzle/index.js';
import { postgresjs } from '../src/postgresjs/index.js';

const NOWHERE = 'postgres://nobody@127.0.0.1:1/none';
const quiet = { onnotice: () => undefined };
const refusesConnectTimeout = (e: unknown) => e instanceof InvalidOptionError && e.code === 'IDEM_INVALID_OPTION' && /connect_timeout/.test(e.message);

describe('client settings that never recover from a silent database are refused', () => {
  test('postgres.js with connect_timeout 0 (a connection into a silent server waits forever)', () => {
    assert.throws(() => postgresjs(postgres(NOWHERE, { ...quiet, connect_timeout: 0 })), refusesConnectTimeout);
  });

  test('Drizzle on postgres.js with connect_timeout 0', () => {
    assert.throws(() => drizzle(onPostgresJs(postgres(NOWHERE, { ...quiet, connect_timeout: 0 }))), refusesConnectTimeout);
  });

  test('postgres.js with its default connect_timeout (30 s) or a short one is accepted', () => {
    assert.equal(postgresjs(postgres(NOWHERE, quiet)).name, 'postgres.js');
    assert.equal(postgresjs(postgres(NOWHERE, { ...quiet, connect_timeout: 2 })).name, 'postgres.js');
  });
});
