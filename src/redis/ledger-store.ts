/**
 * `RedisStore` with `phases` (`PostgresPhases`): the phase ledger decorating the store on Redis
 * alone (key-store.ts). Claims, leases, tokens and replays stay in Redis; each new owner fences
 * the ledger first, phases and the finish commit there with their effects (protocol.md K4, Q4)
 * and are then mirrored to Redis; the ledger is the recovery point when Redis forgets a claim
 * (protocol.md K22).
 */
import { InvalidOptionError } from '../core/errors.js';
import type { ClaimInput, ClaimResult, CommitRecord, Fenced, KeyRef, OperatorWrite, TakeOverResult } from '../store/types.js';
import type { LedgeredMethods, RedisKeyStore } from './key-store.js';
import type { LedgerState, PhaseLedger } from './pg-phases.js';
import { hex } from './records.js';

/**
 * The phase ledger over a {@link RedisKeyStore}: the four methods it changes. `RedisStore` sends
 * the others (lease, release, discard, count, reads) to the store on Redis unchanged.
 */
export class LedgerStore<Tx> implements LedgeredMethods<Tx> {
  constructor(
    private readonly redis: RedisKeyStore,
    private readonly ledger: PhaseLedger<Tx>,
  ) {}

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const claimed = await this.redis.claim(input);
    if (claimed.kind !== 'claimed') return claimed;
    // The new owner fences the ledger first, so no worker of an earlier claim of this key
    // (discarded, past retention, or forgotten by Redis) can still commit a phase there.
    const ref = { scope: input.scope, key: input.key, token: claimed.token };
    const claim = { claimId: claimed.claimId, fingerprint: hex(input.fingerprint), retentionMs: input.retentionMs, owns: () => this.redis.owns(ref) };
    const state = await this.ledger.fence(ref, claim).catch(async (error: unknown) => {
      await this.redis.discard(ref).catch(() => undefined);
      throw error;
    });
    if (state === 'fenced') {
      await this.redis.discard(ref).catch(() => undefined);
      throw new Error('idem/redis: another token holds the phase ledger of a fresh claim (a racing owner); retry');
    }
    // protocol.md K22: the ledger kept the progress of a claim Redis forgot: adopt it.
    if (state.claimId !== claimed.claimId) return this.adopted(ref, state, input.fingerprint);
    return claimed;
  }

  /** A fresh claim that adopted the ledger's claim: the key as read after, which the engine replays, answers as a mismatch, or takes over. */
  private async adopted(ref: KeyRef, state: LedgerState, fingerprint: Uint8Array): Promise<ClaimResult> {
    await this.redis.adopt(ref, state);
    const read = await this.redis.read(ref.scope, ref.key, false);
    if (!read) throw new Error('idem/redis: the key vanished while it adopted the phase ledger; retry');
    const { record } = read;
    if (hex(record.fingerprint) !== hex(fingerprint)) delete record.response; // a mismatch is never replayed
    return { kind: 'exists', record };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const took = await this.redis.takeOverKey(ref, leaseMs);
    if (!took) return { kind: 'lost' };
    const { taken, fingerprint } = took;
    // The ledger is the truth about phases: fence it at the new token, then read them.
    const at: KeyRef = { scope: ref.scope, key: ref.key, token: taken.token };
    const state = await this.ledger.fence(at, { claimId: taken.claimId, fingerprint, owns: () => this.redis.owns(at) });
    if (state === 'fenced') return { kind: 'lost' };
    if (state.response || state.claimId !== taken.claimId) {
      // The finish committed in the ledger but never reached Redis, or the ledger holds another
      // claim's progress (protocol.md K22): Redis takes it; the engine's next claim attempt
      // replays, or takes over and resumes it.
      await this.redis.adopt(at, state);
      return { kind: 'lost' };
    }
    return { ...taken, recoveryPoint: state.recoveryPoint, phaseResults: state.phaseResults };
  }

  /**
   * Effects and record in one ledger transaction (fenced there), then mirrored to Redis: a
   * phase renews the Redis lease and shows its recovery point to `get`; a finish stores the
   * response for replays.
   */
  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: Tx) => Promise<T>): Promise<Fenced<T>> {
    let rec: CommitRecord | undefined;
    const outcome = await this.ledger.commit<T>(ref, (value) => (rec = record(value)), effects);
    if (outcome.kind === 'fenced' || !rec) return outcome;
    const committed = rec;
    // A finish committed in the ledger is the key's response, even if a takeover in Redis
    // fenced this worker there meanwhile (that worker finds it in the ledger and finishes Redis).
    await this.redis.commit(ref, () => committed);
    return outcome;
  }

  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    // protocol.md K22: the ledger would hand the forgotten response back to the next claim.
    if (write.action === 'forget')
      throw new InvalidOptionError('idem/redis: forget is not available with PostgresPhases: the phase ledger still holds the response (protocol.md K22)');
    return this.redis.operate(write);
  }
}
