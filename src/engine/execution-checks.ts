/**
 * The checks of what an execution records: phase names (protocol.md K4), phase results as
 * JSON, and the response a finish stores.
 */
import { PHASE_NAME_PATTERN, RECOVERY_POINT_FINISHED, RECOVERY_POINT_START } from '../core/constants.js';
import { InvalidPhaseError } from '../core/errors.js';
import type { StoredResponse } from '../store/types.js';

/** A phase or call name: 1-64 characters of `[A-Za-z0-9_.-]`, not a reserved recovery point. */
export function checkPhaseName(name: string): void {
  if (typeof name !== 'string' || !PHASE_NAME_PATTERN.test(name)) {
    throw new InvalidPhaseError(`Phase name ${JSON.stringify(name)} must be 1-64 characters of [A-Za-z0-9_.-]`);
  }
  if (name === RECOVERY_POINT_START || name === RECOVERY_POINT_FINISHED) {
    throw new InvalidPhaseError(`Phase name "${name}" is reserved`);
  }
}

/** `value` after a JSON round trip, as a resumed run reads it (`undefined` becomes `null`). */
export function toJson(value: unknown): unknown {
  const text = JSON.stringify(value);
  return text === undefined ? null : JSON.parse(text);
}

/** A response the store can hold: an integer status 100-599 and a byte body. */
export function checkResponse(r: StoredResponse): StoredResponse {
  if (!r || !Number.isInteger(r.status) || r.status < 100 || r.status > 599) {
    throw new TypeError('A stored response needs an integer status between 100 and 599');
  }
  if (!(r.body instanceof Uint8Array)) throw new TypeError('A stored response body must be a Uint8Array');
  return r;
}
