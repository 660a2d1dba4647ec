/**
 * What the parts of the adapter contract share: the suite's environment and context, and the
 * routes and replies several parts use.
 */
import type { IdempotencyOptions } from '../../../src/http/idempotency.js';
import type { Queryable } from '../../../src/postgres/client.js';
import type { AdapterApp, AdapterHarness, Reply, Route } from '../../helpers/adapter-harness.js';
import type { KeyRow, Send } from '../../helpers/http.js';
import type { StoreBackend, StoreHarness } from '../../helpers/stores.js';
import type { TestTime } from '../../helpers/wait.js';

/** For tests that hold a route on a gate: a broken adapter fails them instead of hanging the run. */
export const GATED = { timeout: 15_000 };

export const jsonReply = (status: number, value: unknown, headers: Record<string, string> = {}): Reply => ({
  status,
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(value),
});

/** 201 JSON with allow-listed headers (content-type, location, etag) and never-replayed ones (Set-Cookie, x-request-id). */
export const created: Route = async (req) => {
  const text = await req.text();
  return {
    status: 201,
    headers: { 'content-type': 'application/json', location: '/v1/charges/ch_1', etag: '"v1"', 'x-request-id': `req-${Math.random()}` },
    setCookie: ['session=s3cr3t; HttpOnly'],
    body: JSON.stringify({ id: 'ch_1', received: text.length, at: Math.random() }),
  };
};

export const toJson201 = () => new Response('{"ok":true}', { status: 201, headers: { 'content-type': 'application/json' } });

/** What the suite gets from its caller: the harness, the store backend, cleanups and the clock. */
export interface SuiteEnv {
  harness: AdapterHarness;
  backend(): StoreBackend;
  cleanup(fn: () => Promise<void>): void;
  /** Real time on a database; the memory store's clock (mocked `Date`) moves without waiting. */
  time: TestTime;
  /**
   * Every app gets its own replay cache (protocol.md K20); the store's backdoors that move a
   * key in time or sweep it (`age`, `setLease`, `sweepKey`) clear it, as only real time would.
   */
  replayCache?: boolean;
}

/** An app on a fresh store, as `setup` returns it. */
export interface SetupResult {
  app: AdapterApp;
  h: StoreHarness;
  /** `counter.H`: how many times the route ran. */
  counter: { H: number };
  /** What `onHandlerError` received. */
  errors: unknown[];
  send(path: string, s?: Send): Promise<Response>;
  rows(): Promise<KeyRow[]>;
  count(): Promise<number>;
  /** Everything the store holds, as text. */
  dump(): Promise<string>;
}

/** What every part of the suite works with. */
export interface SuiteContext extends SuiteEnv {
  /** An app on a fresh store, the route behind idem. */
  setup(route: Route, options?: Partial<IdempotencyOptions<Queryable>>): Promise<SetupResult>;
  /** The store of the test running now (tests of a suite run one at a time). */
  current(): StoreHarness;
  /** A business effect in the phase's transaction, as a route would write one. */
  touch(tx: unknown): Promise<unknown>;
}
