/**
 * `RedisStore`: the fast claim on Redis or Redis Cluster, with the whole protocol (claim with
 * the fingerprint checked first, lease, fencing token, takeover by compare-and-set, phases with
 * recovery points, finish, retention). What it does not promise: a phase's effects and its
 * recorded result are not one transaction (see {@link NoTransaction}), and an acknowledged
 * write can be lost on failover unless `durability` waits for replicas (docs/reliability.md).
 */
import { randomUUID } from 'node:crypto';
import { KeyState } from '../core/constants.js';
import { InvalidOptionError } from '../core/errors.js';
import { DEFAULT_STORE_TIMEOUT_MS } from '../store/deadline.js';
import { KeyChangeHub } from '../store/key-changes.js';
import { encodeSnapshot } from '../store/records.js';
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
  StoredResponse,
  TakeOverResult,
} from '../store/types.js';
import { toRunner, type RedisRunner } from './client.js';
import { refusedClientSettings } from './client-settings.js';
import { NotReplicatedError, type DurabilityOptions, type RedisStoreOptions } from './options.js';
import { hex, phases, recordOf, retentionLeft, toFields, toRecord, toSnapshot } from './records.js';
import { hashKey, indexKey, indexMember, parseMember, tokenKey, validatePrefix } from './keys.js';
import type { LedgerState, PhaseLedger } from './pg-phases.js';
import { ReplayShare } from '../store/replay-share.js';
import { ServerClock } from './server-clock.js';
import { ShardChannelFeed } from './subscriber.js';

export { NotReplicatedError, type DurabilityOptions, type RedisStoreOptions } from './options.js';

/**
 * The "transaction" a phase's effects receive on Redis: a marker, not a handle. Redis has no
 * transaction that spans the application's local effects and the store's write, so with
 * `RedisStore` a phase's recorded result is written AFTER its effects: if the process dies in
 * between, or the lease was lost meanwhile, the effects have happened and the phase runs again
 * on the next attempt. Make such effects idempotent themselves (an upsert keyed by the claim
 * id, or `execution.call` with the derived key for anything external). For atomic phases keep
 * the phase's data in PostgreSQL with `PostgresStore` (README, "Redis").
 */
export interface NoTransaction {
  /** Always `false`: effects and the recorded result are not one transaction. */
  readonly atomic: false;
}

/** The one {@link NoTransaction} value passed to every phase's effects. */
export const NO_TRANSACTION: NoTransaction = Object.freeze({ atomic: false as const });

/** How many in-flight index members `listAbandoned` reads per step. */
const INDEX_PAGE = 500;

/**
 * The idempotency store on Redis: one hash per (scope, key), every state change one Lua
 * script (src/redis/scripts.ts), the server's clock for lease and retention.
 *
 * In-flight index (for the completer's `listAbandoned`): one sorted set `<prefix>:inflight`
 * of the keys claimed and not yet finished or discarded. On a single Redis the claim, finish
 * and discard scripts keep it in the same atomic step. On Cluster it cannot share a slot with
 * every key (each key has its own hash tag), so the store writes it with its own command right
 * after the claim script and after finish or discard. A crash between the two leaves the index
 * short of a key whose handler never started (no request snapshot, nothing for a completer to
 * run) or holding a finished key (dropped when next listed). The index stays small: only keys
 * in flight, never the retained history.
 */
export class RedisStore<Tx = NoTransaction> implements IdempotencyStore<Tx> {
  private readonly redis: RedisRunner;
  private readonly prefix: string;
  private readonly index: string;
  private readonly durability: Required<DurabilityOptions> | undefined;
  private readonly ledger: PhaseLedger<Tx> | undefined;
  private readonly replayFastPath: boolean | 'adaptive';
  /** The recent share of claims that found a finished key (protocol.md K28): what `'adaptive'` goes by. */
  private readonly replayShare = new ReplayShare();
  private readonly client: RedisStoreOptions<Tx>['client'];
  private readonly timeoutMs: number;
  private hub: KeyChangeHub | undefined;
  /** The server's clock as an upper bound, for the replay fast path. */
  private readonly clock = new ServerClock();

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
    const refused = refusedClientSettings(options.client);
    if (refused) throw new InvalidOptionError(`idem/redis: ${refused}`);
    try {
      this.redis = toRunner(options.client, { timeoutMs, silentLinkMs });
    } catch (error) {
      throw new InvalidOptionError((error as Error).message);
    }
    this.prefix = validatePrefix(options.prefix ?? 'idem');
    this.index = indexKey(this.prefix);
    this.ledger = options.phases;
    const fastPath = options.replayFastPath ?? 'adaptive';
    if (fastPath !== true && fastPath !== false && fastPath !== 'adaptive')
      throw new InvalidOptionError("idem/redis: replayFastPath must be true, false or 'adaptive'");
    this.replayFastPath = fastPath;
    this.client = options.client;
    this.timeoutMs = timeoutMs;
    if (options.durability) {
      const { replicas, timeoutMs = 1000 } = options.durability;
      if (!Number.isInteger(replicas) || replicas < 1) throw new InvalidOptionError('idem/redis: durability.replicas must be an integer >= 1');
      if (!Number.isInteger(timeoutMs) || timeoutMs < 1) throw new InvalidOptionError('idem/redis: durability.timeoutMs must be an integer >= 1');
      this.durability = { replicas, timeoutMs };
    }
  }

  /**
   * Wait mode (protocol.md K17): a subscription to one key's finish, release, discard and
   * takeover, woken by the sharded pub/sub message its script sends (Redis 7). The first call
   * opens the subscriber (one connection per client, per shard on Cluster, src/redis/subscriber.ts);
   * a store whose engine never waits opens nothing. Subscribing waits at most `storeTimeoutMs`.
   */
  subscribe(scope: string, key: string): Promise<KeyChanges> {
    if (!this.hub) {
      const feed = new ShardChannelFeed(this.client, (s, k) => hashKey(this.prefix, s, k));
      this.hub = new KeyChangeHub(feed, this.timeoutMs);
      feed.hub = this.hub;
    }
    return this.hub.subscribe(scope, key);
  }

  /** KEYS of a script: hash, token counter, and the index on a single Redis. */
  private keys(scope: string, key: string): string[] {
    const h = hashKey(this.prefix, scope, key);
    return this.redis.cluster ? [h, tokenKey(h)] : [h, tokenKey(h), this.index];
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const keys = this.keys(input.scope, input.key);
    const fastPath = this.replayFastPath === true || (this.replayFastPath === 'adaptive' && this.replayShare.frequent());
    if (fastPath) {
      // Replay fast path: a plain HGETALL answers a retry of a finished key without a script
      // (a Lua call costs the server several times a bare HGETALL). A finished hash only
      // changes by expiring, so this read cannot be stale in a way that matters; anything else
      // goes to the claim script. The retention is judged by the server's clock as a bound
      // (src/redis/server-clock.ts, docs/protocol.md K28): a TIME rides along only when that
      // bound is older than a second.
      const h = keys[0]!;
      const sample = this.clock.stale() ? this.clock.sample((args) => this.redis.command(h, args)) : undefined;
      const hash = await this.redis.command(h, ['HGETALL', h]);
      if (sample) await sample;
      const f = toFields(hash);
      if (f.st === KeyState.Done) {
        const latestNowMs = this.clock.latestNowMs();
        if (Number(f.ca) > latestNowMs - input.retentionMs) {
          const record = recordOf(input.scope, input.key, 0, f);
          if (f.fp !== hex(input.fingerprint)) delete record.response; // a mismatch is never replayed
          record.retentionRemainingMs = retentionLeft(f, input.retentionMs, latestNowMs);
          this.replayShare.add(true);
          return { kind: 'exists', record };
        }
      }
    }
    const member = indexMember(input.scope, input.key);
    const fingerprint = hex(input.fingerprint);
    const claimId = randomUUID();
    const leaseMs = Math.max(0, Math.floor(input.leaseMs));
    const retentionMs = Math.floor(input.retentionMs);
    // The hash lives until creation + retention, or the lease's end if later; the counter a
    // retention longer (scripts.ts CLAIM).
    const hashTtlMs = Math.max(retentionMs, leaseMs);
    const reply = (await this.redis.script('claim', keys, [
      fingerprint,
      String(leaseMs),
      String(retentionMs),
      claimId,
      member,
      String(hashTtlMs),
      String(hashTtlMs + retentionMs),
    ])) as string | [string, string, unknown];
    // protocol.md K28: whether the key was finished, learned from the script's answer too, so a
    // fast path skipped for a while comes back as soon as retries of finished keys do.
    const record = Array.isArray(reply) ? toRecord(input.scope, input.key, Number(reply[1]), reply[2] as unknown[], input.retentionMs) : undefined;
    this.replayShare.add(record?.state === KeyState.Done);
    if (!record) {
      // The new token alone (scripts.ts CLAIM): the claim id is the one sent.
      const token = Number(reply);
      if (this.redis.cluster) await this.redis.command(this.index, ['ZADD', this.index, String(Date.now()), member]);
      if (this.durability) {
        try {
          await this.wait(keys[0]!, 'claim');
        } catch (error) {
          await this.discard({ scope: input.scope, key: input.key, token }).catch(() => undefined);
          throw error;
        }
      }
      if (this.ledger) {
        // The new owner fences the ledger first, so no worker of an earlier claim of this key
        // (discarded, past retention, or forgotten by Redis) can still commit a phase there.
        const ref = { scope: input.scope, key: input.key, token };
        const claim = { claimId, fingerprint, retentionMs: input.retentionMs, owns: () => this.owns(ref) };
        const state = await this.ledger.fence(ref, claim).catch(async (error: unknown) => {
          await this.discard(ref).catch(() => undefined);
          throw error;
        });
        if (state === 'fenced') {
          await this.discard(ref).catch(() => undefined);
          throw new Error('idem/redis: another token holds the phase ledger of a fresh claim (a racing owner); retry');
        }
        // protocol.md K22: the ledger kept the progress of a claim Redis forgot: adopt it.
        if (state.claimId !== claimId) return this.adopted(ref, state, input.fingerprint);
      }
      // The hash's `ca` is this script's server time: its whole retention is left (protocol.md K20).
      return { kind: 'claimed', token, claimId, retentionRemainingMs: Math.floor(input.retentionMs) };
    }
    return { kind: 'exists', record };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const reply = (await this.redis.script('takeOver', this.keys(ref.scope, ref.key).slice(0, 2), [
      String(ref.token),
      String(Math.max(0, Math.floor(leaseMs))),
    ])) as [string, unknown[]] | null;
    if (!reply) return { kind: 'lost' };
    const f = toFields(reply[1]);
    const token = Number(reply[0]);
    const claimId = f.cid ?? '';
    // protocol.md K23: the script counted a lease that ran out unreleased.
    const failedAttempts = Number(f.na ?? 0);
    if (!this.ledger) return { kind: 'taken', token, claimId, recoveryPoint: f.rp ?? 'start', phaseResults: phases(f), failedAttempts };
    // The ledger is the truth about phases: fence it at the new token, then read them.
    const taken: KeyRef = { scope: ref.scope, key: ref.key, token };
    const state = await this.ledger.fence(taken, { claimId, fingerprint: f.fp, owns: () => this.owns(taken) });
    if (state === 'fenced') return { kind: 'lost' };
    if (state.response || state.claimId !== claimId) {
      // The finish committed in the ledger but never reached Redis, or the ledger holds another
      // claim's progress (protocol.md K22): Redis takes it; the engine's next claim attempt
      // replays, or takes over and resumes it.
      await this.adopt(taken, state);
      return { kind: 'lost' };
    }
    return { kind: 'taken', token, claimId, recoveryPoint: state.recoveryPoint, phaseResults: state.phaseResults, failedAttempts };
  }

  /**
   * Runs `effects` (given {@link NO_TRANSACTION}), THEN records `record(value)` with one fenced
   * script. Not atomic: when the token is stale the effects have already happened and are not
   * undone (the result is `fenced`); when `effects` throws nothing is recorded.
   */
  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T>> {
    if (this.ledger) return this.commitInLedger(this.ledger, ref, record, effects);
    const value = effects ? await effects(NO_TRANSACTION as Tx) : (undefined as T);
    const rec = record(value);
    const keys = this.keys(ref.scope, ref.key);
    const token = String(ref.token);
    if (rec.kind === 'phase') {
      const ok = await this.redis.script('recordPhase', keys.slice(0, 2), [
        token,
        rec.phase,
        JSON.stringify(rec.result ?? null),
        String(Math.max(0, Math.floor(rec.leaseMs))),
      ]);
      return ok ? { kind: 'ok', value } : { kind: 'fenced' };
    }
    return (await this.finishInRedis(ref, rec.response)) ? { kind: 'ok', value } : { kind: 'fenced' };
  }

  /** The fenced finish script, the index update on Cluster, and WAIT when `durability` is set. */
  private async finishInRedis(ref: KeyRef, response: StoredResponse): Promise<boolean> {
    const keys = this.keys(ref.scope, ref.key);
    const member = indexMember(ref.scope, ref.key);
    const ok = await this.redis.script('finish', this.redis.cluster ? [keys[0]!] : keys, [
      String(ref.token),
      String(response.status),
      JSON.stringify(response.headers),
      Buffer.from(response.body.buffer, response.body.byteOffset, response.body.byteLength).toString('base64'),
      member,
    ]);
    if (!ok) return false;
    if (this.redis.cluster) await this.redis.command(this.index, ['ZREM', this.index, member]);
    if (this.durability) await this.wait(keys[0]!, 'finish');
    return true;
  }

  /**
   * A commit with {@link RedisStoreOptions.phases}: effects and record in one ledger
   * transaction (fenced there), then mirrored to Redis: a phase renews the Redis lease and
   * shows its recovery point to `get`; a finish stores the response for replays.
   */
  private async commitInLedger<T>(
    ledger: PhaseLedger<Tx>,
    ref: KeyRef,
    record: (value: T) => CommitRecord,
    effects?: (tx: Tx) => Promise<T>,
  ): Promise<Fenced<T>> {
    let rec: CommitRecord | undefined;
    const outcome = await ledger.commit<T>(ref, (value) => (rec = record(value)), effects);
    if (outcome.kind === 'fenced' || !rec) return outcome;
    if (rec.kind === 'phase') {
      const keys = this.keys(ref.scope, ref.key).slice(0, 2);
      await this.redis.script('recordPhase', keys, [
        String(ref.token),
        rec.phase,
        JSON.stringify(rec.result ?? null),
        String(Math.max(0, Math.floor(rec.leaseMs))),
      ]);
      return outcome;
    }
    // Committed in the ledger: the response is the key's, even if a takeover in Redis fenced
    // this worker there meanwhile (that worker finds it in the ledger and finishes Redis).
    await this.finishInRedis(ref, rec.response);
    return outcome;
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    const ok = await this.redis.script('extendLease', this.keys(ref.scope, ref.key).slice(0, 2), [String(ref.token), String(Math.max(0, Math.floor(leaseMs)))]);
    return ok ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    const count = await this.redis.script('countFailure', this.keys(ref.scope, ref.key).slice(0, 1), [String(ref.token)]);
    return count ? { kind: 'ok', value: Number(count) } : { kind: 'fenced' };
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    const ended = await this.end(ref, false);
    return ended.kind === 'ok' ? { kind: 'ok', value: 'released' } : ended;
  }

  async discard(ref: KeyRef): Promise<Fenced<'released' | 'deleted'>> {
    return this.end(ref, true);
  }

  /** Ends the lease (release), or deletes a key on which no phase committed (discard): one script. */
  private async end(ref: KeyRef, discard: boolean): Promise<Fenced<'released' | 'deleted'>> {
    const keys = this.keys(ref.scope, ref.key);
    const member = indexMember(ref.scope, ref.key);
    const scriptKeys = this.redis.cluster ? [keys[0]!] : [keys[0]!, keys[1]!, keys[2]!];
    const reply = await this.redis.script('release', scriptKeys, [String(ref.token), discard ? '1' : '0', member]);
    if (reply !== 'released' && reply !== 'deleted') return { kind: 'fenced' };
    if (reply === 'deleted' && this.redis.cluster) await this.redis.command(this.index, ['ZREM', this.index, member]);
    return { kind: 'ok', value: reply };
  }

  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const { scope, key, token } = write.ref;
    // protocol.md K22: the ledger would hand the forgotten response back to the next claim.
    if (write.action === 'forget' && this.ledger)
      throw new InvalidOptionError('idem/redis: forget is not available with PostgresPhases: the phase ledger still holds the response (protocol.md K22)');
    const keys = this.keys(scope, key);
    const member = indexMember(scope, key);
    const reply = await this.redis.script('operate', keys, [String(token), write.action, write.force ? '1' : '0', write.note, member, randomUUID()]);
    if (reply === null || reply === undefined || reply === false) return { kind: 'fenced' };
    if (write.action === 'forget' && this.redis.cluster) await this.redis.command(this.index, ['ZADD', this.index, String(Date.now()), member]);
    // protocol.md K40: the key's waiters hear of it, as of a release by its worker (K30); sent
    // after the script, as its own command. Lost (a Redis before 7): they read at their deadline.
    await this.redis.command(keys[0]!, ['SPUBLISH', keys[0]!, '1']).catch(() => undefined);
    return { kind: 'ok', value: { token: Number(reply) } };
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const read = await this.read(scope, key, false);
    if (!read || read.pastRetention(retentionMs)) return undefined;
    return read.record;
  }

  async saveRequest(ref: KeyRef, request: RequestSnapshot): Promise<Fenced> {
    const snapshot = encodeSnapshot(request);
    const ok = await this.redis.script('saveRequest', [hashKey(this.prefix, ref.scope, ref.key)], [String(ref.token), snapshot]);
    return ok ? { kind: 'ok', value: undefined } : { kind: 'fenced' };
  }

  /**
   * Reads the in-flight index and each listed key (by the server's clock); drops members whose
   * key finished or is gone. Costs one read per key in flight, so call it every few seconds,
   * not per request.
   */
  async listAbandoned(options: { limit: number; graceMs: number; retentionMs: number }): Promise<AbandonedKey[]> {
    const graceMs = Math.max(0, Math.floor(options.graceMs));
    const found: Array<{ leaseEndMs: number; item: AbandonedKey }> = [];
    for (let start = 0; ; start += INDEX_PAGE) {
      const members = (await this.redis.command(this.index, ['ZRANGE', this.index, String(start), String(start + INDEX_PAGE - 1)])) as string[];
      const stale: string[] = [];
      await Promise.all(
        members.map(async (member) => {
          const ref = parseMember(member);
          if (!ref) return stale.push(member);
          const read = await this.read(ref.scope, ref.key, true);
          if (!read || read.record.state === KeyState.Done) return stale.push(member);
          const { record, leaseEndMs, nowMs } = read;
          if (read.pastRetention(options.retentionMs)) return;
          if (leaseEndMs !== 0 && leaseEndMs > nowMs - graceMs) return;
          const item: AbandonedKey = { record };
          if (read.request) item.request = read.request;
          found.push({ leaseEndMs, item });
        }),
      );
      if (stale.length > 0) {
        await this.redis.command(this.index, ['ZREM', this.index, ...stale]);
        start -= stale.length;
      }
      if (members.length < INDEX_PAGE) break;
    }
    found.sort((a, b) => a.leaseEndMs - b.leaseEndMs);
    return found.slice(0, Math.max(0, options.limit)).map((f) => f.item);
  }

  private async read(scope: string, key: string, withRequest: boolean) {
    const reply = (await this.redis.script('read', [hashKey(this.prefix, scope, key)], [withRequest ? '1' : '0'])) as [string, unknown[]] | null;
    if (!reply) return undefined;
    const nowMs = Number(reply[0]);
    const f = toFields(reply[1]);
    const record = recordOf(scope, key, nowMs, f);
    const createdMs = Number(f.ca);
    return {
      record,
      nowMs,
      leaseEndMs: Number(f.lu ?? 0),
      request: toSnapshot(f.rq),
      pastRetention: (retentionMs: number) => createdMs <= nowMs - retentionMs,
    };
  }

  /**
   * protocol.md K22: the ledger holds progress of a claim Redis forgot (or a finish Redis never
   * got). The key, held at `ref.token`, takes that claim's fingerprint, id, recovery point and
   * phases with its lease ended, then its response when the finish committed.
   */
  private async adopt(ref: KeyRef, state: LedgerState): Promise<void> {
    const h = hashKey(this.prefix, ref.scope, ref.key);
    const results = Object.entries(state.phaseResults).flatMap(([phase, value]) => [phase, JSON.stringify(value ?? null)]);
    const ok = await this.redis.script('adopt', [h], [String(ref.token), state.fingerprint ?? '', state.claimId, state.recoveryPoint, ...results]);
    if (ok && state.response) await this.finishInRedis(ref, state.response);
  }

  /** A fresh claim that adopted the ledger's claim: the key as read after, which the engine replays, answers as a mismatch, or takes over. */
  private async adopted(ref: KeyRef, state: LedgerState, fingerprint: Uint8Array): Promise<ClaimResult> {
    await this.adopt(ref, state);
    const read = await this.read(ref.scope, ref.key, false);
    if (!read) throw new Error('idem/redis: the key vanished while it adopted the phase ledger; retry');
    const { record } = read;
    if (hex(record.fingerprint) !== hex(fingerprint)) delete record.response; // a mismatch is never replayed
    return { kind: 'exists', record };
  }

  /** Whether `ref.token` holds the key in Redis now (`started`): the check before a lower token supersedes the ledger's (protocol.md K22). */
  private async owns(ref: KeyRef): Promise<boolean> {
    const h = hashKey(this.prefix, ref.scope, ref.key);
    const [tok, st] = (await this.redis.command(h, ['HMGET', h, 'tok', 'st'])) as [unknown, unknown];
    return String(tok) === String(ref.token) && String(st) === KeyState.Started;
  }

  /** WAIT for `durability.replicas`; throws {@link NotReplicatedError} when fewer acknowledged. */
  private async wait(key: string, what: string): Promise<void> {
    const { replicas, timeoutMs } = this.durability!;
    const acked = Number(await this.redis.command(key, ['WAIT', String(replicas), String(timeoutMs)]));
    if (acked < replicas) throw new NotReplicatedError(what, acked, replicas);
  }
}
