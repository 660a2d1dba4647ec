/**
 * `DurableObjectStore`: an {@link IdempotencyStore} for Cloudflare Workers whose every key is
 * one Durable Object (`IdemKeyObject`, object.ts), named `idFromName(JSON.stringify([scope,
 * key]))`. The object is the key's single writer: the claim, the takeover and each fenced write
 * run inside it, one transaction of its storage each (key-object.ts), so two Workers racing for
 * a key meet in one place. Called over RPC on the namespace's stubs.
 *
 * A phase's effects run in the Worker, not in the object: they are not one transaction with the
 * recorded result (the tx is {@link NoTransaction}, as on Redis). A fenced or failed commit
 * records nothing, and effects that already ran stay: make them idempotent (an upsert keyed by
 * the claim id, or `execution.call` with the derived key, protocol.md K11).
 */
import type { NoTransaction } from '../redis/no-transaction.js';
import { InvalidOptionError } from '../core/errors.js';
import { DEFAULT_STORE_TIMEOUT_MS, withDeadline } from '../store/deadline.js';
import type {
  ClaimInput,
  ClaimResult,
  CommitRecord,
  Fenced,
  IdempotencyStore,
  KeyRecord,
  KeyRef,
  OperatorWrite,
  StoreCapabilities,
  StoredResponse,
  TakeOverResult,
} from '../store/types.js';
import { asJson } from '../memory/entry.js';
import type { KeyObject } from './key-object.js';
import type { WireCommit, WireRecord } from './wire.js';
import type { DurableObjectNamespaceLike } from './workers-types.js';

export type { NoTransaction } from '../redis/no-transaction.js';

/** The stub of one key's object: its RPC methods (key-object.ts), as `namespace.get(id)` returns it. */
export type KeyObjectStub = Pick<KeyObject, 'claim' | 'takeOver' | 'commit' | 'extendLease' | 'release' | 'discard' | 'countFailure' | 'get' | 'operate'>;

/** Options of {@link DurableObjectStore}. */
export interface DurableObjectStoreOptions {
  /** The namespace binding of the `IdemKeyObject` class (`env.IDEM`, wrangler `durable_objects.bindings`). */
  namespace: DurableObjectNamespaceLike<unknown>;
  /**
   * The deadline of each call to a key's object, in ms (protocol.md H17): past it the call fails
   * with a `StoreTimeoutError` (the request gets the 503 with `Retry-After`); a late call may
   * still take effect, and every later write is fenced by the token. `0`: no deadline.
   * @default 5000
   */
  storeTimeoutMs?: number;
}

const TX: NoTransaction = Object.freeze({ atomic: false as const });
const bytes = (b: Uint8Array): Uint8Array => new Uint8Array(b);
const response = (r: StoredResponse): StoredResponse => ({
  status: r.status,
  headers: r.headers.map(([name, value]) => [name, value] as [string, string]),
  body: bytes(r.body),
});

/**
 * The Durable Objects store. One object per key: no shard is a hot spot, and each key's lease
 * clock is its object's (protocol.md K7).
 *
 * @example
 * ```ts
 * import { DurableObjectStore } from 'idem/cloudflare';
 * const store = new DurableObjectStore({ namespace: env.IDEM });
 * ```
 */
export class DurableObjectStore implements IdempotencyStore<NoTransaction> {
  /** Operator writes (protocol.md K40). No completer: objects cannot be listed; no wait mode; retention by each object's alarm, no sweep. */
  readonly capabilities: StoreCapabilities = { operator: true };
  readonly noSubscribe = 'DurableObjectStore does not wake waiters (wait mode would hold an RPC open on the key object for each waiting duplicate)';
  private readonly namespace: DurableObjectNamespaceLike<unknown>;
  private readonly timeoutMs: number;

  /** @throws {InvalidOptionError} when `namespace` is not a Durable Object namespace binding, or `storeTimeoutMs` is not a number of ms >= 0 */
  constructor(options: DurableObjectStoreOptions) {
    const ns = options?.namespace as Partial<DurableObjectNamespaceLike> | undefined;
    if (!ns || typeof ns.idFromName !== 'function' || typeof ns.get !== 'function') {
      throw new InvalidOptionError('DurableObjectStore: namespace must be the Durable Object namespace binding of IdemKeyObject (env.IDEM)');
    }
    const timeoutMs = options.storeTimeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
    if (typeof timeoutMs !== 'number' || !(timeoutMs >= 0))
      throw new InvalidOptionError('idem/cloudflare: storeTimeoutMs must be a number of ms >= 0 (0: no deadline)');
    this.namespace = options.namespace;
    this.timeoutMs = timeoutMs;
  }

  async claim(input: ClaimInput): Promise<ClaimResult> {
    const out = await this.call(input.scope, input.key, 'claim', (o) => o.claim({ ...input, fingerprint: bytes(input.fingerprint) }));
    if (out.kind === 'exists') return { kind: 'exists', record: record(out.record) };
    return { kind: 'claimed', token: out.token, claimId: out.claimId, retentionRemainingMs: out.retentionRemainingMs };
  }

  async takeOver(ref: KeyRef, leaseMs: number): Promise<TakeOverResult> {
    const out = await this.call(ref.scope, ref.key, 'takeOver', (o) => o.takeOver(ref.token, leaseMs));
    if (out.kind !== 'taken') return { kind: 'lost' };
    const { token, claimId, recoveryPoint, phaseResults, failedAttempts } = out;
    return { kind: 'taken', token, claimId, recoveryPoint, phaseResults: asJson(phaseResults) as Record<string, unknown>, failedAttempts };
  }

  /** Runs `effects` in the Worker, then records `record(value)` in the key's object, fenced by the token (not one transaction: see above). */
  commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects: (tx: NoTransaction) => Promise<T>): Promise<Fenced<T>>;
  commit(ref: KeyRef, record: (value: undefined) => CommitRecord): Promise<Fenced<undefined>>;
  async commit<T>(ref: KeyRef, record: (value: T) => CommitRecord, effects?: (tx: NoTransaction) => Promise<T>): Promise<Fenced<T>> {
    const value = effects ? await effects(TX) : (undefined as T);
    const rec = record(value);
    const wire: WireCommit =
      rec.kind === 'phase'
        ? { kind: 'phase', phase: rec.phase, result: asJson(rec.result), leaseMs: rec.leaseMs }
        : { kind: 'finish', response: response(rec.response) };
    const out = await this.call(ref.scope, ref.key, 'commit', (o) => o.commit(ref.token, wire));
    return out.kind === 'ok' ? { kind: 'ok', value } : { kind: 'fenced' };
  }

  async extendLease(ref: KeyRef, leaseMs: number): Promise<Fenced> {
    return fenced(await this.call(ref.scope, ref.key, 'extendLease', (o) => o.extendLease(ref.token, leaseMs)), undefined);
  }

  async release(ref: KeyRef): Promise<Fenced<'released'>> {
    return fenced(await this.call(ref.scope, ref.key, 'release', (o) => o.release(ref.token)), 'released' as const);
  }

  async discard(ref: KeyRef): Promise<Fenced<'deleted' | 'released'>> {
    const out = await this.call(ref.scope, ref.key, 'discard', (o) => o.discard(ref.token));
    return out.kind === 'ok' ? { kind: 'ok', value: out.value === 'deleted' ? 'deleted' : 'released' } : { kind: 'fenced' };
  }

  async countFailure(ref: KeyRef): Promise<Fenced<number>> {
    const out = await this.call(ref.scope, ref.key, 'countFailure', (o) => o.countFailure(ref.token));
    return out.kind === 'ok' ? { kind: 'ok', value: Number(out.value) } : { kind: 'fenced' };
  }

  async get(scope: string, key: string, retentionMs: number): Promise<KeyRecord | undefined> {
    const out = await this.call(scope, key, 'get', (o) => o.get(retentionMs));
    return out ? record(out) : undefined;
  }

  async operate(write: OperatorWrite): Promise<Fenced<{ token: number }>> {
    const out = await this.call(write.ref.scope, write.ref.key, 'operate', (o) => o.operate({ ...write, ref: { ...write.ref } }));
    return out.kind === 'ok' ? { kind: 'ok', value: { token: Number(out.value.token) } } : { kind: 'fenced' };
  }

  /**
   * `fn` on the object of (scope, key) under the deadline: one object per key, named by both
   * (JSON, so no two pairs share a name).
   */
  private call<R>(scope: string, key: string, method: string, fn: (object: KeyObjectStub) => Promise<R>): Promise<R> {
    const object = this.namespace.get(this.namespace.idFromName(JSON.stringify([scope, key]))) as KeyObjectStub;
    return withDeadline(fn(object), this.timeoutMs, () => `idem/cloudflare: ${method} on the key's Durable Object got no answer within ${this.timeoutMs} ms`);
  }
}

/** The object's answer as this store's own values (an RPC result may be a proxy of the runtime's). */
function fenced<T>(out: Fenced<unknown>, value: T): Fenced<T> {
  return out.kind === 'ok' ? { kind: 'ok', value } : { kind: 'fenced' };
}

function record(wire: WireRecord): KeyRecord {
  const out: KeyRecord = {
    scope: wire.scope,
    key: wire.key,
    state: wire.state,
    fingerprint: bytes(wire.fingerprint),
    recoveryPoint: wire.recoveryPoint,
    phaseResults: asJson(wire.phaseResults) as Record<string, unknown>,
    token: wire.token,
    claimId: wire.claimId,
    leaseExpired: wire.leaseExpired,
    leaseRemainingMs: wire.leaseRemainingMs,
    createdAt: new Date(wire.createdAt),
  };
  if (wire.response) out.response = response(wire.response);
  if (wire.retentionRemainingMs !== undefined) out.retentionRemainingMs = wire.retentionRemainingMs;
  if (wire.operatorNote !== undefined) out.operatorNote = wire.operatorNote;
  return out;
}
