/**
 * The replay cache (protocol.md K20): finished keys held in this process, so a retry of a
 * finished key is answered with no store round trip. Bounded in bytes, least recently used
 * first out; every entry carries a deadline on the monotonic clock, derived from the
 * retention the store reported by its own clock, so no entry outlives its row's retention
 * whatever the process's wall clock does; and a deadline on the wall clock as well, so a
 * suspended host (whose monotonic clock stands still) cannot extend an entry either.
 */
import { KeyState } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import type { KeyRecord, StoredResponse } from '../store/types.js';

/** Options of {@link ReplayCache}. */
export interface ReplayCacheOptions {
  /**
   * The most bytes the entries may hold: bodies, headers, fingerprints, scopes and keys, plus
   * a fixed overhead per entry ({@link ENTRY_OVERHEAD_BYTES}). Past it the least recently used
   * entries go. A response larger than this is not cached.
   * @default 33_554_432 (32 MiB)
   */
  maxBytes?: number;
  /**
   * Safety margin in ms taken off every entry's retention left, for the clocks: an entry is
   * dropped `marginMs` + 0.1 % of the retention left before the store's clock ends its
   * retention (NTP slews a clock by at most 0.05 %).
   * @default 1000
   */
  marginMs?: number;
  /**
   * Also cache responses the store keeps sealed (encryption at rest, protocol.md K15). Off,
   * a sealed response never sits opened in this process's memory beyond one request.
   * @default false
   */
  sealed?: boolean;
}

/** Counters of a {@link ReplayCache}, for tests and metrics. */
export interface ReplayCacheStats {
  /** Entries held now. */
  entries: number;
  /** Bytes held now, as counted against `maxBytes`. */
  bytes: number;
  /** Lookups answered from the cache. */
  hits: number;
  /** Lookups that found nothing, or an entry past its deadline. */
  misses: number;
  /** Entries dropped to stay within `maxBytes`. */
  evictions: number;
}

/**
 * Bytes counted per entry on top of its contents (bodies, strings at 2 bytes a character): the
 * entry, record, response, header and typed-array objects, the Date and the map slot. Measured
 * with `bench/replay-cache.ts` (`--only=cache`): 100,000 entries of a 500 B body took about
 * 1,750 B of heap each, and are counted at about 1,770 B with this overhead.
 */
export const ENTRY_OVERHEAD_BYTES = 1000;

/** The default byte bound, 32 MiB. */
export const DEFAULT_REPLAY_CACHE_BYTES = 32 * 1024 * 1024;

/** Per mille of the retention left taken off an entry's lifetime, for clock-rate drift. */
const DRIFT = 0.001;

interface Entry {
  /** The finished record, frozen, with its response. */
  record: KeyRecord;
  /** `performance.now()` at or after which the entry is never served. */
  deadline: number;
  /**
   * `Date.now()` at or after which the entry is never served either: the monotonic clock
   * stands still while the host or VM is suspended, the wall clock does not. Served only while
   * both hold, so a wall-clock step back cannot extend an entry and a suspend cannot either.
   */
  wallDeadline: number;
  bytes: number;
}

/**
 * An in-process cache of finished keys, shared by every request of the engines it is given
 * to (`new IdempotencyEngine({ store, replayCache })`; all of them must use the same store and
 * retention). Only `done` records enter it: a finished response is immutable until its
 * retention ends (protocol.md K20). The records it hands out are frozen; do not change them.
 *
 * A Map in insertion order is the LRU list: a hit moves its entry to the end, eviction takes
 * from the front.
 *
 * @example
 * ```ts
 * const replayCache = new ReplayCache({ maxBytes: 64 * 1024 * 1024 });
 * app.use(idempotency({ store, replayCache }));
 * ```
 */
export class ReplayCache {
  readonly maxBytes: number;
  readonly marginMs: number;
  /** True when sealed responses are cached too (see {@link ReplayCacheOptions.sealed}). */
  readonly sealed: boolean;
  private readonly entries = new Map<string, Entry>();
  private held = 0;
  private hits = 0;
  private misses = 0;
  private evictions = 0;
  private owner: { store: object; retentionMs: number } | undefined;

  /** @throws {InvalidOptionError} for a `maxBytes` that is not a whole number >= 0, or a negative `marginMs` */
  constructor(options: ReplayCacheOptions = {}) {
    this.maxBytes = options.maxBytes ?? DEFAULT_REPLAY_CACHE_BYTES;
    if (!(Number.isSafeInteger(this.maxBytes) && this.maxBytes >= 0)) {
      throw new InvalidOptionError('idem: replayCache.maxBytes must be a whole number of bytes >= 0');
    }
    this.marginMs = options.marginMs ?? 1000;
    if (!(Number.isFinite(this.marginMs) && this.marginMs >= 0)) {
      throw new InvalidOptionError('idem: replayCache.marginMs must be a number of ms >= 0');
    }
    this.sealed = options.sealed === true;
  }

  /**
   * Ties the cache to one store and retention: entries are keyed by (scope, key) and bounded
   * by the retention they were read with, so an engine with another store or retention must
   * not share them. Called by the engine's constructor.
   * @throws {InvalidOptionError} when already tied to another store or retention
   */
  attach(store: object, retentionMs: number): void {
    if (!this.owner) this.owner = { store, retentionMs };
    else if (this.owner.store !== store || this.owner.retentionMs !== retentionMs) {
      throw new InvalidOptionError('idem: a ReplayCache serves one store with one retentionMs; give each engine of another store its own');
    }
  }

  /** The finished record of (scope, key), or undefined (absent, or its deadline passed). Counts as a use. */
  get(scope: string, key: string): KeyRecord | undefined {
    const id = idOf(scope, key);
    const entry = this.entries.get(id);
    if (entry === undefined) {
      this.misses++;
      return undefined;
    }
    this.entries.delete(id);
    if (performance.now() >= entry.deadline || Date.now() >= entry.wallDeadline) {
      this.held -= entry.bytes;
      this.misses++;
      return undefined;
    }
    this.entries.set(id, entry);
    this.hits++;
    return entry.record;
  }

  /**
   * Keeps (a copy of) a finished record read by the store. `startedAt` is `performance.now()` taken before
   * the store was asked, so the deadline (`startedAt` + retention left − margin) falls before
   * the store's clock ends the retention. A record that is not `done`, has no response or no
   * `retentionRemainingMs`, is sealed (unless {@link sealed}), too short-lived or too large is
   * not kept.
   */
  fill(record: KeyRecord, startedAt: number): void {
    if (record.state !== KeyState.Done || record.response === undefined || record.retentionRemainingMs === undefined) return;
    if (record.sealed === true && !this.sealed) return;
    const response = record.response;
    // The cache's own shallow copy (the caller's record stays as it is), with bytes that own
    // their memory: a driver's small buffers are views into shared slabs, which a kept view
    // would keep alive whole, past what maxBytes counts.
    const kept: KeyRecord = {
      scope: record.scope,
      key: record.key,
      state: record.state,
      fingerprint: owned(record.fingerprint),
      recoveryPoint: record.recoveryPoint,
      phaseResults: record.phaseResults,
      token: record.token,
      claimId: record.claimId,
      leaseExpired: record.leaseExpired,
      leaseRemainingMs: record.leaseRemainingMs,
      createdAt: record.createdAt,
      response: { status: response.status, headers: response.headers.map(([name, value]) => [name, value] as [string, string]), body: owned(response.body) },
      retentionRemainingMs: record.retentionRemainingMs,
    };
    if (record.sealed === true) kept.sealed = true;
    this.keep(kept, record.retentionRemainingMs, startedAt);
  }

  /**
   * Keeps the response this process just stored for a key it claimed (its own finish). The
   * record is built from what the claim returned; the response is copied.
   */
  fillFinished(
    base: Omit<KeyRecord, 'state' | 'response' | 'recoveryPoint' | 'leaseExpired' | 'leaseRemainingMs'>,
    response: StoredResponse,
    remainingMs: number,
    startedAt: number,
  ): void {
    // Listed field by field: a frozen object made by spreading measured larger (bench/replay-cache.ts).
    const record: KeyRecord = {
      scope: base.scope,
      key: base.key,
      state: KeyState.Done,
      fingerprint: base.fingerprint,
      phaseResults: base.phaseResults,
      token: base.token,
      claimId: base.claimId,
      createdAt: base.createdAt,
      recoveryPoint: 'finished',
      leaseExpired: true,
      leaseRemainingMs: 0,
      response: {
        status: response.status,
        headers: response.headers.map(([name, value]) => [name, value] as [string, string]),
        body: new Uint8Array(response.body),
      },
    };
    this.keep(record, remainingMs, startedAt);
  }

  /** Drops every entry (counters stay). */
  clear(): void {
    this.entries.clear();
    this.held = 0;
  }

  /** Current size and counters. */
  stats(): ReplayCacheStats {
    return { entries: this.entries.size, bytes: this.held, hits: this.hits, misses: this.misses, evictions: this.evictions };
  }

  private keep(record: KeyRecord, remainingMs: number, startedAt: number): void {
    if (!(Number.isFinite(remainingMs) && Number.isFinite(startedAt))) return;
    const deadline = startedAt + remainingMs - this.marginMs - remainingMs * DRIFT;
    const now = performance.now();
    if (deadline <= now) return;
    const wallDeadline = Date.now() + (deadline - now);
    const id = idOf(record.scope, record.key);
    const bytes = sizeOf(id, record);
    if (bytes > this.maxBytes) return;
    const previous = this.entries.get(id);
    if (previous !== undefined) {
      this.entries.delete(id);
      this.held -= previous.bytes;
    }
    const response = record.response!;
    Object.freeze(response.headers);
    Object.freeze(response);
    this.entries.set(id, { record: Object.freeze(record), deadline, wallDeadline, bytes });
    this.held += bytes;
    for (const [oldest, entry] of this.entries) {
      if (this.held <= this.maxBytes) break;
      this.entries.delete(oldest);
      this.held -= entry.bytes;
      this.evictions++;
    }
  }
}

/** `bytes` itself when it spans its whole buffer, else a copy that does. */
function owned(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : new Uint8Array(bytes);
}

/** The map key of (scope, key): length-prefixed, so no two pairs share one. */
function idOf(scope: string, key: string): string {
  return `${scope.length}:${scope}${key}`;
}

/** Bytes an entry is counted for: strings at 2 bytes a character, bytes as they are, plus the overhead. */
function sizeOf(id: string, record: KeyRecord): number {
  const response = record.response!;
  let bytes = ENTRY_OVERHEAD_BYTES + 2 * id.length + record.fingerprint.byteLength + response.body.byteLength + 2 * record.claimId.length;
  for (const [name, value] of response.headers) bytes += 2 * (name.length + value.length) + 32;
  for (const _ in record.phaseResults) {
    bytes += 2 * JSON.stringify(record.phaseResults).length;
    break;
  }
  return bytes;
}
