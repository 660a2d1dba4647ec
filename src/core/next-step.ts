/**
 * The next-step signal (protocol.md H41): what a client may do after an answer, so that it never
 * has to guess between reusing a key forever and minting a new one that could charge twice.
 * Every problem idem answers carries it as the members `operation_state` and `safe_new_key`
 * and the header {@link OPERATION_STATE_HEADER}; a replay carries the header.
 */

/** What idem knows about the work of one key when it answers. */
export const OperationState = {
  /**
   * No declared effect of this key can exist: no phase or call committed, no derived key was
   * handed out, and no earlier attempt of the key could have done either. A new key is as safe
   * as the same key.
   */
  NotApplied: 'not-applied',
  /** The work is in progress, or was cut off mid-way: some of it may have been applied. Retry with the same key only. */
  MaybeApplied: 'maybe-applied',
  /** The work finished, but its response was not kept. Do not repeat it, under any key. */
  AppliedResultUnavailable: 'applied-result-unavailable',
  /** The key belongs to another request, whose effects stand. Send that request to retry it; a new key is a new operation. */
  KeyMismatch: 'key-mismatch',
  /** A replay: the key's work is done and this is its answer. */
  Completed: 'completed',
} as const;
export type OperationState = (typeof OperationState)[keyof typeof OperationState];

/** The response header that carries the {@link OperationState} (protocol.md H41). */
export const OPERATION_STATE_HEADER = 'Idem-Operation-State';

const STATES = new Set<string>(Object.values(OperationState));

/** True when a client may send the request again under a new key without risking a second effect. */
export function isSafeNewKey(state: OperationState | undefined): boolean {
  return state === OperationState.NotApplied;
}

/** The {@link OperationState} a header value names, or `undefined` for none or an unknown value. */
export function parseOperationState(value: string | null | undefined): OperationState | undefined {
  const text = value?.trim().toLowerCase();
  return text !== undefined && STATES.has(text) ? (text as OperationState) : undefined;
}
