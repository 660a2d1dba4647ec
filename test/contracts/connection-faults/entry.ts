/**
 * One client in the connection-fault contract (test/connection-faults.test.ts): how the service
 * under test builds its store on that client, and what the contract must know about it. A new
 * client is one {@link FaultEntry} added to the table in ./entries.ts; the faults, the child
 * process and the checks are the contract's (./contract.ts, ./app.ts).
 *
 * An entry lives on both sides: the contract (test process) reads `name`, `needs`, `servers`,
 * `idleMs` and calls `cleanup`; the service (a child process, ./app.ts) calls `open`, with every
 * server address mapped to the fault proxy in front of it.
 */
import type { IdempotencyStore } from '../../../src/store/types.js';

/** A server's address on loopback. */
export interface Endpoint {
  host: string;
  port: number;
}

/** What `open` gets in the child. */
export interface OpenContext {
  /** The proxy in front of `server` (one of `servers()`): connect there, never to `server`. */
  via(server: Endpoint): Endpoint;
  /** A fresh name for this run: the table, or the key prefix. */
  name: string;
  /** The store's `storeTimeoutMs`: the contract expects every 503 within it + 1 s. */
  storeTimeoutMs: number;
}

/** The store the service runs on, and how to close its client. */
export interface OpenedStore {
  // biome-ignore lint/suspicious/noExplicitAny: each client has its own transaction type
  store: IdempotencyStore<any>;
  close(): Promise<void>;
}

/** One client idem accepts, configured as docs/connection-faults.md says. */
export interface FaultEntry {
  /** For test titles, and how the child finds the entry (`FAULT_CLIENT`). */
  name: string;
  /** The environment variable the entry's server needs; without it the entry is skipped. */
  needs: 'DATABASE_URL' | 'REDIS_URL' | 'MYSQL_URL';
  /** The servers the client talks to: each gets a fault proxy in front of it (test side; may start them). */
  servers(): Endpoint[] | Promise<Endpoint[]>;
  /**
   * An idle spell longer than every timer of the client as `open` configures it (idle
   * timeouts, keepalive, socket timeouts), in ms: the "idle" fault and the recovery after
   * idleness wait this long with no traffic.
   */
  idleMs: number;
  /**
   * The client resends a command its lost connection never answered (ioredis,
   * `autoResendUnfulfilledCommands`): the request in flight at a cut may answer 201, still
   * within `storeTimeoutMs` + 1 s, instead of 503.
   */
  resendsCut?: boolean;
  /**
   * Faults (by `Fault.name`) the client is known to fail for a reason outside idem, with that
   * reason (an upstream issue): the row runs and is reported as a todo, not a failure.
   */
  knownFailures?: Record<string, string>;
  /** Child side: the client, through the proxies, and the store on it (migrated, ready). */
  open(ctx: OpenContext): Promise<OpenedStore>;
  /** Test side: removes what `open` created under `name` (tables, keys). */
  cleanup(name: string): Promise<void>;
}
