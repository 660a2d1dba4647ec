/**
 * The protocol on Redis alone (`RedisStore` without `phases`): one hash per (scope, key),
 * every state change one Lua script (src/redis/scripts.ts), the server's clock for lease and
 * retention. `RedisStore` (store.ts) builds it from its options; with `PostgresPhases` the
 * phase ledger decorates its claim, takeover, commit and operator writes (ledger-store.ts),
 * using `takeOverKey`, `adopt`, `owns` and `read`.
 */
import { randomUUID } from 'node:crypto';
import { KeyState } from '../core/constants.js';
import { encodeSnapshot } from '../store/records.js';
import { ReplayShare } from '../store/replay-share.js';
import type {
  AbandonedKey,
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  KeyRecord,
  KeyRef,
  OperatorWrite,
  RequestSnapshot,
  StoredResponse,
  TakeOverResult,
} from '../store/types.js';
import { hashKey, indexKey, indexMember, parseMember, tokenKey } from './keys.js';
import { NO_TRANSACTION, type NoTransaction } from './no-transaction.js';
import { NotReplicatedError, type DurabilityOptions } from './options.js';
import type { LedgerState } from './pg-phases.js';
import { hex, phases, recordOf, retentionLeft, toFields, toRecord, toSnapshot } from './records.js';
import type { RedisRunner } from './runner.js';
import { ServerClock } from './server-clock.js';

/** How many in-flight index members `listAbandoned` reads per step. */
const INDEX_PAGE = 500;

/**
 * The methods the phase ledger changes (ledger-store.ts): `RedisStore` sends them to the store
 * on Redis alone ({@link RedisKeyStore}) or, with `phases`, to the ledger over it.
 */
export interface LedgeredMethods<Tx> {
  claim(input: ClaimInput): Promise<ClaimResult>;
  takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult>;
  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T>>;
  operate(write: OperatorWrite): Promise<Fenced<{ token: number }>>;
}

/** What {@link RedisKeyStore} is built from: the options `RedisStore` validated. */
export interface RedisKeySettings {
  redis: RedisRunner;
  prefix: string;
  durability: Required<DurabilityOptions> | undefined;
  replayFastPath: boolean | 'adaptive';
}

/**
 * The idempotency store on Redis: claims, leases, fencing, phases recorded after their effects
 * (not atomic, {@link NoTransaction}), finish, retention.
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
export class RedisKeyStore implements LedgeredMethods<NoTransaction> {
  private readonly redis: RedisRunner;
  private readonly prefix: string;
  private readonly index: string;
  private readonly durability: Required<DurabilityOptions> | undefined;
  private readonly replayFastPath: boolean | 'adaptive';
  /** The recent share of claims that found a finished key (protocol.md K28): what `'adaptive'` goes by. */
  private readonly replayShare = new ReplayShare();
  /** The server's clock as an upper bound, for the replay fast path. */
  private readonly clock = new ServerClock();

  constructor(settings: RedisKeySettings) {
    this.redis = settings.redis;
    this.prefix = settings.prefix;
    this.index = indexKey(settings.prefix);
    this.durability = settings.durability;
    this.replayFastPath = settings.replayFastPath;
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
      // The hash's `ca` is this script's server time: its whole retention is left (protocol.md K20).
      return { kind: 'claimed', token, claimId, retentionRemainingMs: Math.floor(input.retentionMs) };
    }
    return { kind: 'exists', record };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    return (await this.takeOverKey(ref, leaseMs))?.taken ?? { kind: 'lost' };
  }

  /** The takeover script; with the taken key, the fingerprint (hex) its hash holds, which the phase ledger's fence keeps. */
  async takeOverKey(ref: KeyRef, leaseMs: number): Promise<{ taken: Extract<TakeOverResult, { kind: 'taken' }>; fingerprint: string | undefined } | undefined> {
    const reply = (await this.redis.script('takeOver', this.keys(ref.scope, ref.key).slice(0, 2), [
      String(ref.token),
      String(Math.max(0, Math.floor(leaseMs))),
    ])) as [string, unknown[]] | null;
    if (!reply) return undefined;
    const f = toFields(reply[1]);
    // protocol.md K23: the script counted a lease that ran out unreleased.
    const failedAttempts = Number(f.na ?? 0);
    const taken = {
      kind: 'taken' as const,
      token: Number(reply[0]),
      claimId: f.cid ?? '',
      recoveryPoint: f.rp ?? 'start',
      phaseResults: phases(f),
      failedAttempts,
    };
    return { taken, fingerprint: f.fp };
  }

  /**
   * Runs `effects` (given {@link NO_TRANSACTION}), THEN records `record(value)` with one fenced
   * script. Not atomic: when the token is stale the effects have already happened and are not
   * undone (the result is `fenced`); when `effects` throws nothing is recorded.
   */
  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: NoTransaction) => Promise<T>): Promise<Fenced<T>> {
    const value = effects ? await effects(NO_TRANSACTION) : (undefined as T);
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

  /** One key with the server's now, at any age (`pastRetention` tells), with its request snapshot when asked. */
  async read(scope: string, key: string, withRequest: boolean) {
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
  async adopt(ref: KeyRef, state: LedgerState): Promise<void> {
    const h = hashKey(this.prefix, ref.scope, ref.key);
    const results = Object.entries(state.phaseResults).flatMap(([phase, value]) => [phase, JSON.stringify(value ?? null)]);
    const ok = await this.redis.script('adopt', [h], [String(ref.token), state.fingerprint ?? '', state.claimId, state.recoveryPoint, ...results]);
    if (ok && state.response) await this.finishInRedis(ref, state.response);
  }

  /** Whether `ref.token` holds the key in Redis now (`started`): the check before a lower token supersedes the ledger's (protocol.md K22). */
  async owns(ref: KeyRef): Promise<boolean> {
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
