/**
 * The Worker test/helpers/durable-object-stores.ts runs in Miniflare: idem's `IdemKeyObject`
 * with the store contract's backdoors (as SQL reaches a table), each one step of the object's
 * own storage. Bundled with esbuild; `cloudflare:workers` stays external (workerd provides it).
 */
import { openCell, type CellState, type KeyRow } from '../../src/cloudflare/cells.js';
import { IdemKeyObject } from '../../src/cloudflare/object.js';
import type { DurableObjectStateLike } from '../../src/cloudflare/workers-types.js';
import type { ClaimInput } from '../../src/store/types.js';

export class TestKeyObject extends IdemKeyObject {
  private readonly backdoor: ReturnType<typeof openCell>;

  constructor(ctx: DurableObjectStateLike, env: unknown) {
    super(ctx, env);
    this.backdoor = openCell(ctx.storage);
  }

  private edit(fn: (row: KeyRow, state: CellState) => void): Promise<void> {
    return this.backdoor.update((state) => {
      if (state.row) fn(state.row, state);
      return { result: undefined, write: state.row !== undefined };
    });
  }

  /** Moves the key's creation and lease `ms` into the past. */
  testAge(ms: number) {
    return this.edit((row) => {
      row.createdAt -= ms;
      if (row.lockedUntil !== null) row.lockedUntil -= ms;
    });
  }
  /** Sets the lease to end `ms` from now. */
  testSetLease(ms: number) {
    return this.edit((row) => {
      row.lockedUntil = Date.now() + ms;
    });
  }
  /** A takeover's token move, as another worker would make it. */
  testBumpToken() {
    return this.edit((row, state) => {
      state.lastToken = Math.max(state.lastToken + 1, Date.now());
      row.token = state.lastToken;
    });
  }
  /** The stored row, as JSON (bytes as arrays), or null. */
  testRow() {
    return this.backdoor.update((state) => ({
      result: state.row ? JSON.stringify(state.row, (_k, v: unknown) => (v instanceof Uint8Array ? Array.from(v) : v)) : null,
      write: false,
    }));
  }
  /** A claim of the key `never-answers` answers after 10 minutes: an object that hangs (protocol.md H17). */
  override async claim(input: ClaimInput) {
    if (input.key === 'never-answers') await new Promise((resolve) => setTimeout(resolve, 600_000));
    return super.claim(input);
  }
  /** Runs the retention alarm now. */
  testAlarm() {
    return this.alarm();
  }
}

export default { fetch: () => new Response('idem durable object test worker') };
