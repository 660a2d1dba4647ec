/**
 * The engine with its store gone: over every SQL store of the suite the client is closed under a
 * running engine; an unreachable database fails closed.
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { after, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { engineSuite, SCOPE, FP } from './helpers/engine-suite.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import type { IdempotencyEvent } from '../src/engine/execution.js';
import { PostgresStore } from '../src/postgres/index.js';
import { ErrorCode, StoreUnavailableError } from '../src/core/errors.js';

engineSuite((s) => {
  describe('store unavailable', { skip: !s.factory.capabilities.sql && 'an in-process store has no connection to lose' }, () => {
    it('throws StoreUnavailableError with the driver error as cause when the client is closed', async () => {
      await s.h.drop();
      await s.closeBackend();
      const events: IdempotencyEvent[] = [];
      const engine = new IdempotencyEngine({ store: s.h.store, onEvent: (e) => events.push(e) });
      await assert.rejects(engine.begin({ scope: SCOPE, key: 'k', fingerprint: FP }), (error: unknown) => {
        assert.ok(error instanceof StoreUnavailableError, 'error instanceof StoreUnavailableError');
        assert.equal(error.code, ErrorCode.StoreUnavailable);
        assert.ok(error.cause instanceof Error, 'cause carries the driver error');
        return true;
      });
      assert.deepEqual(
        events.map((e) => e.type),
        ['store-unavailable'],
      );
    });
  });
});

describe('IdempotencyEngine with an unreachable database', () => {
  const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMillis: 2000 });
  after(async () => {
    await pool.end();
  });

  it('fails closed: begin throws StoreUnavailableError with the connection error as cause', async () => {
    const engine = new IdempotencyEngine({ store: new PostgresStore({ client: pool }) });
    await assert.rejects(engine.begin({ scope: SCOPE, key: 'k', fingerprint: FP }), (error: unknown) => {
      assert.ok(error instanceof StoreUnavailableError, 'error instanceof StoreUnavailableError');
      assert.equal(error.code, ErrorCode.StoreUnavailable);
      assert.equal((error.cause as { code?: string }).code, 'ECONNREFUSED');
      return true;
    });
  });
});
