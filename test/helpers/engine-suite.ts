/**
 * The engine suite's frame, shared by the test/engine-*.test.ts files (one file per concern):
 * {@link engineSuite} registers a concern's tests on every store of test/helpers/stores.ts
 * `suiteStores` (the memory store on virtual time, PostgresStore on PGlite and, when
 * DATABASE_URL is set, on PostgreSQL, plain and partitioned, and the other full entries), each
 * test on a fresh store. Tests that wait for a lease to run out wait on the suite's clock: real
 * time on a database, node:test mock timers on the memory store (the fast tier).
 */
import { afterEach, beforeEach, describe } from 'node:test';
import assert from 'node:assert/strict';
import { type StoreFactory, type StoreHarness, suiteStores, useStoreBackend } from './stores.js';
import { eventually as eventuallyOn, realTime, type TestTime, virtualTime } from './wait.js';
import { IdempotencyEngine, type BeginResult, type EngineOptions } from '../../src/engine/engine.js';
import type { Execution } from '../../src/engine/execution.js';
import type { KeyRecord, StoredResponse } from '../../src/store/types.js';

export type X = Execution<unknown>;
export const SCOPE = 'tenant-1';
export const FP = new Uint8Array(32).fill(1);
export const OTHER_FP = new Uint8Array(32).fill(2);
/** A short lease, for tests that wait for it to run out. */
export const SHORT_LEASE_MS = 200;

/** A stored response of `status` with an octet-stream body of `body`. */
export const response = (status: number, body: number[] = []): StoredResponse => ({
  status,
  headers: [['content-type', 'application/octet-stream']],
  body: new Uint8Array(body),
});

/** The execution of an `execute` result; fails the test on any other kind. */
export function executionOf(result: BeginResult<unknown>): X {
  assert.equal(result.kind, 'execute', `expected execute, got ${result.kind}`);
  return (result as Extract<BeginResult<unknown>, { kind: 'execute' }>).execution;
}

/** What a concern's tests get: the current store and the engine helpers bound to it. */
export interface EngineSuite {
  factory: StoreFactory;
  /** The fresh store of the running test. */
  readonly h: StoreHarness;
  time: TestTime;
  sleep(ms: number): Promise<void>;
  /** Calls `probe` every 20 ms until `done` holds for its result, or fails after `timeoutMs` (on the suite's clock). */
  eventually<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs?: number): Promise<T>;
  makeEngine(options?: Partial<EngineOptions<unknown>>): IdempotencyEngine<unknown>;
  /** Begins `key` (an execution it opens is released after the test). */
  begin(engine: IdempotencyEngine<unknown>, key?: string, fingerprint?: Uint8Array): Promise<BeginResult<unknown>>;
  /** Waits until the lease on `key` has run out and a begin takes it over. */
  takeOver(engine: IdempotencyEngine<unknown>, key?: string): Promise<X>;
  /** The notes of the business effects that took hold. */
  sideNotes(): Promise<string[]>;
  /** A business effect inside the phase's transaction (see StoreHarness.effect); returns `note`. */
  insertSide(note: string): (tx: unknown) => Promise<string>;
  /** The stored record of `key`. */
  record(key?: string): Promise<KeyRecord | undefined>;
  /** Closes the store's backend for good (the store-unavailable tests; `afterEach` then skips the drop). */
  closeBackend(): Promise<void>;
}

/**
 * Registers `body` (a concern's `describe` blocks) under `IdempotencyEngine on <store>` for
 * every store of `suiteStores`, each test on a fresh store dropped after it.
 */
export function engineSuite(body: (s: EngineSuite) => void): void {
  for (const factory of suiteStores) {
    describe(`IdempotencyEngine on ${factory.name}`, () => {
      const conn = useStoreBackend(factory);
      const time = factory.capabilities.virtualTime ? virtualTime : realTime;
      let h: StoreHarness;
      let closed = false;
      const open: X[] = [];

      beforeEach(async () => {
        h = await conn.backend().fresh();
        time.start();
      });
      afterEach(async () => {
        // Stop any heartbeat still running before its table disappears.
        for (const x of open.splice(0)) await x.release().catch(() => {});
        time.stop();
        if (closed) return;
        await h.drop();
      });

      const begin: EngineSuite['begin'] = async (engine, key = 'k', fingerprint = FP) => {
        const result = await engine.begin({ scope: SCOPE, key, fingerprint });
        if (result.kind === 'execute') open.push(result.execution);
        return result;
      };
      const eventually: EngineSuite['eventually'] = (probe, done, timeoutMs = 3000) => eventuallyOn(probe, done, { timeoutMs, time });
      body({
        factory,
        get h() {
          return h;
        },
        time,
        sleep: (ms) => time.sleep(ms),
        eventually,
        makeEngine: (options = {}) => new IdempotencyEngine<unknown>({ store: h.store, ...options }),
        begin,
        takeOver: async (engine, key = 'k') =>
          executionOf(
            await eventually(
              () => begin(engine, key),
              (r) => r.kind !== 'in-progress',
            ),
          ),
        sideNotes: () => h.effects(),
        insertSide: (note) => async (tx) => {
          await h.effect(note)(tx);
          return note;
        },
        record: (key = 'k') => h.store.get(SCOPE, key, 86_400_000),
        async closeBackend() {
          await conn.close();
          closed = true;
        },
      });
    });
  }
}
