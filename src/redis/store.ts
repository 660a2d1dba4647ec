/**
 * `RedisStore`: the fast claim on Redis or Redis Cluster, with the whole protocol (claim with
 * the fingerprint checked first, lease, fencing token, takeover by compare-and-set, phases with
 * recovery points, finish, retention). What it does not promise: a phase's effects and its
 * recorded result are not one transaction (see {@link NoTransaction}), and an acknowledged
 * write can be lost on failover unless `durability` waits for replicas (docs/reliability.md).
 *
 * This file checks the options, resolves the client's driver once, and forwards each call to
 * the store on Redis alone (key-store.ts) or, with `phases`, to the phase ledger decorating it
 * (ledger-store.ts). Wait mode's subscriber is opened here, at the first wait.
 */
import { InvalidOptionError } from '../core/errors.js';
import { DEFAULT_STORE_TIMEOUT_MS } from '../store/deadline.js';
import { KeyChangeHub } from '../store/key-changes.js';
import type {
  AbandonedKey,
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyChanges,
  KeyRecord,
  KeyRef,
  OperatorWrite,
  RequestSnapshot,
  StoreCapabilities,
  TakeOverResult,
} from '../store/types.js';
import { resolveDriver, type RedisDriver } from './client.js';
import { refusedClientSettings } from './client-settings.js';
import { type LedgeredMethods, RedisKeyStore } from './key-store.js';
import { hashKey, validatePrefix } from './keys.js';
import { LedgerStore } from './ledger-store.js';
import type { NoTransaction } from './no-transaction.js';
import type { DurabilityOptions, RedisStoreOptions } from './options.js';
import { toRunner } from './runner.js';
import { ShardChannelFeed } from './subscriber.js';
import { DEFAULT_POLL, PollingFeed } from '../store/polling-feed.js';
import type { RedisRunner } from './runner.js';

export { NO_TRANSACTION, type NoTransaction } from './no-transaction.js';
export { NotReplicatedError, type DurabilityOptions, type RedisStoreOptions } from './options.js';

/**
 * The idempotency store on Redis: one hash per (scope, key), every state change one Lua
 * script (src/redis/scripts.ts), the server's clock for lease and retention; with `phases`,
 * phases commit in PostgreSQL with their effects (src/redis/ledger-store.ts, protocol.md K22).
 */
export class RedisStore<Tx = NoTransaction> implements IdempotencyStore<Tx> {
  /** The store on Redis alone. */
  private readonly keys: RedisKeyStore;
  /** Claim, takeover, commit and operator writes: {@link keys}, or the phase ledger over it. */
  private readonly ledgered: LedgeredMethods<Tx>;
  private readonly driver: RedisDriver;
  private readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly redis: RedisRunner;
  private hub: KeyChangeHub | undefined;
  /** Beyond the core (protocol.md "Store capabilities"): completer, wait mode, operator writes; keys expire in Redis, no sweep. */
  readonly capabilities: StoreCapabilities = { completion: true, notify: true, operator: true };

  /**
   * @throws {InvalidOptionError} no usable client, a node-redis client that never reconnects
   *   (protocol.md H25), a prefix with `{` or `}`, a bad `durability`, `storeTimeoutMs` or `silentLinkMs`
   */
  constructor(options: RedisStoreOptions<Tx>) {
    if (!options?.client) throw new InvalidOptionError('idem/redis: option client is required');
    const timeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
    if (!(typeof timeoutMs === 'number' && timeoutMs >= 0))
      throw new InvalidOptionError('idem/redis: storeTimeoutMs must be a number of ms >= 0 (0: no deadline)');
    const silentLinkMs = options.silentLinkMs ?? 3 * timeoutMs;
    if (!(typeof silentLinkMs === 'number' && silentLinkMs >= 0))
      throw new InvalidOptionError('idem/redis: silentLinkMs must be a number of ms >= 0 (0: never reset a silent connection)');
    try {
      this.driver = resolveDriver(options.client);
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    const refused = refusedClientSettings(this.driver);
    if (refused) throw new InvalidOptionError(`idem/redis: ${refused}`);
    this.prefix = validatePrefix(options.prefix ?? 'idem');
    const replayFastPath = options.replayFastPath ?? 'adaptive';
    if (replayFastPath !== true && replayFastPath !== false && replayFastPath !== 'adaptive')
      throw new InvalidOptionError("idem/redis: replayFastPath must be true, false or 'adaptive'");
    this.timeoutMs = timeoutMs;
    const redis = toRunner(this.driver, { timeoutMs, silentLinkMs });
    this.redis = redis;
    this.keys = new RedisKeyStore({ redis, prefix: this.prefix, durability: durabilityOf(options.durability), replayFastPath });
    // Without a ledger Tx is NoTransaction (the options' default): the store on Redis alone.
    this.ledgered = options.phases ? new LedgerStore(this.keys, options.phases) : (this.keys as unknown as LedgeredMethods<Tx>);
  }

  /**
   * Wait mode (protocol.md K17): a subscription to one key's finish, release, discard and
   * takeover, woken by the sharded pub/sub message its script sends (Redis 7). The first call
   * opens the subscriber (one connection per client, per shard on Cluster, src/redis/subscriber.ts);
   * a store whose engine never waits opens nothing. Subscribing waits at most `storeTimeoutMs`.
   * On a standalone GLIDE `GlideClient`, which has no sharded pub/sub, a waited-for key is polled
   * instead (one `HMGET` per poll, protocol.md K55).
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    if (!this.hub && this.driver.kind === 'glide' && !this.driver.cluster) {
      const feed = new PollingFeed(async (s, k) => {
        const h = hashKey(this.prefix, s, k);
        // What a finish, release, discard, takeover or operator write changes: token, state, lease end.
        const [tok, st, lu, rl] = (await this.redis.command(h, ['HMGET', h, 'tok', 'st', 'lu', 'rl'])) as unknown[];
        return tok === null || tok === undefined ? 'gone' : [tok, st, lu, rl].map(String).join('|');
      }, DEFAULT_POLL);
      this.hub = new KeyChangeHub(feed, this.timeoutMs);
      feed.hub = this.hub;
    }
    if (!this.hub) {
      const feed = new ShardChannelFeed(this.driver, (s, k) => hashKey(this.prefix, s, k), this.timeoutMs);
      this.hub = new KeyChangeHub(feed, this.timeoutMs);
      feed.hub = this.hub;
    }
    return this.hub.subscribe(scope, key);
  }

  claim(input: ClaimInput): Promise<ClaimResult> {
    return this.ledgered.claim(input);
  }

  takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    return this.ledgered.takeOver(ref, leaseMs);
  }

  /**
   * Without `phases`: runs `effects` (given {@link NO_TRANSACTION}), THEN records `record(value)`
   * with one fenced script. Not atomic: when the token is stale the effects have already
   * happened and are not undone (the result is `fenced`); when `effects` throws nothing is
   * recorded. With `phases`: effects and record in one ledger transaction, then mirrored to Redis.
   */
  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T>> {
    return this.ledgered.commit(ref, record, effects);
  }

  extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    return this.keys.extendLease(ref, leaseMs);
  }

  countFailure(ref: KeyRef): Promise<Fenced<number>> {
    return this.keys.countFailure(ref);
  }

  release(ref: KeyRef): Promise<Fenced<'released'>> {
    return this.keys.release(ref);
  }

  discard(ref: KeyRef): Promise<Fenced<'released' | 'deleted'>> {
    return this.keys.discard(ref);
  }

  operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    return this.ledgered.operate(write);
  }

  get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    return this.keys.get(scope, key, retentionMs);
  }

  saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    return this.keys.saveRequest(ref, request);
  }

  /**
   * Reads the in-flight index and each listed key (by the server's clock); drops members whose
   * key finished or is gone. Costs one read per key in flight, so call it every few seconds,
   * not per request.
   */
  listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    return this.keys.listAbandoned(options);
  }
}

/** `durability` checked, with its default WAIT timeout. */
function durabilityOf(durability: DurabilityOptions | undefined): Required<DurabilityOptions> | undefined {
  if (!durability) return undefined;
  const { replicas, timeoutMs = 1000 } = durability;
  if (!Number.isInteger(replicas) || replicas < 1) throw new InvalidOptionError('idem/redis: durability.replicas must be an integer >= 1');
  if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new InvalidOptionError('idem/redis: durability.timeoutMs must be an integer >= 1');
  return { replicas, timeoutMs };
}
