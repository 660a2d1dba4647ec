/**
 * The adapter contract suite: every HTTP behaviour idem promises, stated once and run against
 * every adapter harness (test/helpers/adapter-harness.ts) over every store (test/adapters.test.ts,
 * the store list in test/helpers/stores.ts), as the store contract is run against every store.
 * H counts how many times the route ran; every behaviour is checked against the stored keys as
 * well. What only one framework can show (Hono's HTTPException, Express's raw socket and
 * writeHead) lives in its own test file. The parts, by concern, are in ./adapter-suite/.
 */
import { afterEach, beforeEach, it } from 'node:test';
import assert from 'node:assert/strict';
import type { Queryable } from '../../src/postgres/client.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import { ReplayCache } from '../../src/engine/replay-cache.js';
import type { AdapterHarness } from '../helpers/adapter-harness.js';
import { assertProblem, requestInit, type Send, unreachableStore } from '../helpers/http.js';
import type { StoreHarness } from '../helpers/stores.js';
import type { SuiteContext, SuiteEnv } from './adapter/shared.js';
import { requestSuite } from './adapter/requests.js';
import { inFlightSuite } from './adapter/in-flight.js';
import { scopeSuite } from './adapter/scope.js';
import { storedSuite } from './adapter/stored.js';
import { respondSuite } from './adapter/respond.js';
import { problemSuite } from './adapter/problems.js';
import { expirySuite } from './adapter/expiry.js';
import { keyHeaderSuite } from './adapter/key-header.js';

export type { SuiteEnv } from './adapter/shared.js';

/**
 * Registers the contract suite for `env.harness` on `env.backend()` (connected in a `before` of
 * the caller); `env.cleanup` collects what to drop or close after the suite.
 */
export function adapterContract(env: SuiteEnv): void {
  const { harness, cleanup, time } = env;
  let current: StoreHarness | undefined;
  beforeEach(() => time.start());
  afterEach(() => time.stop());

  const context: SuiteContext = {
    ...env,
    current: () => current!,
    touch: (tx) => current!.effect('touch')(tx),
    async setup(route, options = {}) {
      const fresh = await env.backend().fresh();
      cleanup(() => fresh.drop());
      const cache = env.replayCache ? new ReplayCache() : undefined;
      const h = cache ? clearingOnTimeTravel(fresh, cache) : fresh;
      current = h;
      const errors: unknown[] = [];
      const counter = { H: 0 };
      // The route's tx is the store's own; routes here only hand it to the harness's effects.
      const store = h.store as IdempotencyStore<Queryable>;
      const app = harness.build(
        { store, onHandlerError: (e) => errors.push(e), ...(cache ? { replayCache: cache } : {}), ...options },
        (req, ctx) => {
          counter.H++;
          return route(req, ctx);
        },
        cleanup,
      );
      const send = (path: string, s: Send = {}) => app.send(path, requestInit(s));
      return { app, h, counter, errors, send, rows: () => h.rows(), count: () => h.count(), dump: () => h.dump() };
    },
  };
  requestSuite(context);
  inFlightSuite(context);
  scopeSuite(context);
  storedSuite(context);
  respondSuite(context);
  problemSuite(context);
  expirySuite(context);
  keyHeaderSuite(context);
}

/**
 * The harness with its time-travel backdoors clearing the replay cache: moving a row's
 * created_at in the database is not time passing for the process, and a cache bounded by the
 * time left (protocol.md K20) would rightly still serve it.
 */
function clearingOnTimeTravel(h: StoreHarness, cache: ReplayCache): StoreHarness {
  return {
    ...h,
    age: async (scope, key, ms) => {
      await h.age(scope, key, ms);
      cache.clear();
    },
    setLease: async (scope, key, ms) => {
      await h.setLease(scope, key, ms);
      cache.clear();
    },
    ...(h.sweepKey
      ? {
          sweepKey: async (scope: string, key: string) => {
            const n = await h.sweepKey!(scope, key);
            cache.clear();
            return n;
          },
        }
      : {}),
  };
}

/**
 * The part of the contract that needs no database: with an unreachable store the adapter
 * fails closed. Registered once per adapter, outside the engine loop.
 */
export function unreachableStoreContract(harness: AdapterHarness, cleanup: (fn: () => Promise<void>) => void): void {
  it('answers a 503 idempotency-store-unavailable problem with Retry-After: 1 and does not run the handler (fail closed)', async () => {
    const down = unreachableStore();
    try {
      let H = 0;
      const app = harness.build(
        { store: down.store },
        () => {
          H++;
          return { status: 201, body: 'ran' };
        },
        cleanup,
      );
      const res = await app.send('/v1/charges', requestInit({ key: 'k-down', json: { amount: 1 } }));
      assert.equal(res.headers.get('retry-after'), '1');
      await assertProblem(res, 503, 'idempotency-store-unavailable');
      assert.equal(H, 0);
    } finally {
      await down.close();
    }
  });
}
