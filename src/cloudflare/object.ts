/**
 * `IdemKeyObject`, the Durable Object class a Worker exports and binds for
 * {@link DurableObjectStore} (store.ts): one object per idempotency key, its methods the store's
 * RPC calls (key-object.ts). Imports `cloudflare:workers`, so it loads on workerd only; the store
 * itself does not.
 *
 * @example
 * ```ts
 * export { IdemKeyObject } from 'idem/cloudflare/object';
 * ```
 */
import { DurableObject } from 'cloudflare:workers';
import type { ClaimInput, OperatorWrite } from '../store/types.js';
import { KeyObject } from './key-object.js';
import type { WireCommit } from './wire.js';
import type { DurableObjectStateLike } from './workers-types.js';

/** One idempotency key's Durable Object; bind it with a SQLite-backed migration (`new_sqlite_classes`) or a key-value one (`new_classes`). */
export class IdemKeyObject extends DurableObject {
  private readonly keyObject: KeyObject;

  constructor(ctx: DurableObjectStateLike, env: unknown) {
    super(ctx, env);
    this.keyObject = new KeyObject(ctx.storage);
  }

  claim(input: ClaimInput) {
    return this.keyObject.claim(input);
  }
  takeOver(token: number, leaseMs: number) {
    return this.keyObject.takeOver(token, leaseMs);
  }
  commit(token: number, record: WireCommit) {
    return this.keyObject.commit(token, record);
  }
  extendLease(token: number, leaseMs: number) {
    return this.keyObject.extendLease(token, leaseMs);
  }
  release(token: number) {
    return this.keyObject.release(token);
  }
  discard(token: number) {
    return this.keyObject.discard(token);
  }
  countFailure(token: number) {
    return this.keyObject.countFailure(token);
  }
  get(retentionMs: number) {
    return this.keyObject.get(retentionMs);
  }
  operate(write: OperatorWrite) {
    return this.keyObject.operate(write);
  }
  /** The retention alarm (protocol.md K6): deletes the key once past retention with its lease over. */
  override alarm() {
    return this.keyObject.alarm();
  }
}
