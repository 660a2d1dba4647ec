import type { StoredResponse } from '../store/types.js';
import type { StoredFailure } from './errors.js';

/**
 * How a function's result is stored and read back. The first call returns `decode(encode(value))`
 * too, so the first call and every replay see the same value.
 */
export interface ResultCodec<R> {
  /** Stored with the result, e.g. `application/json`. */
  contentType: string;
  encode(value: R): Uint8Array | string;
  decode(bytes: Uint8Array): R;
}

/** JSON: `undefined` is stored as an empty body and read back as `undefined`; a `Date` comes back as its ISO string. */
export function jsonCodec<R>(): ResultCodec<R> {
  return {
    contentType: 'application/json',
    encode: (value) => (value === undefined ? '' : (JSON.stringify(value) ?? '')),
    decode: (bytes) => (bytes.length === 0 ? undefined : JSON.parse(new TextDecoder().decode(bytes))) as R,
  };
}

/** The stored form of a result: status 200 and the codec's bytes. */
export function resultRecord<R>(codec: ResultCodec<R>, value: R): StoredResponse {
  const encoded = codec.encode(value);
  const body = typeof encoded === 'string' ? new TextEncoder().encode(encoded) : encoded;
  if (!(body instanceof Uint8Array)) throw new TypeError('idem: a codec must encode to a string or a Uint8Array');
  return { status: 200, headers: [['content-type', codec.contentType]], body };
}

/** The status a stored failure is kept under (a result is 200). */
export const FAILURE_STATUS = 500;

/** The stored form of a thrown error kept by `storeErrors`. */
export function failureRecord(error: unknown): StoredResponse {
  const e = (typeof error === 'object' && error !== null ? error : { message: String(error) }) as { name?: unknown; message?: unknown; code?: unknown };
  const failure: StoredFailure = { name: typeof e.name === 'string' ? e.name : 'Error', message: typeof e.message === 'string' ? e.message : String(error) };
  if (typeof e.code === 'string' || typeof e.code === 'number') failure.code = e.code;
  return { status: FAILURE_STATUS, headers: [['content-type', 'application/json']], body: new TextEncoder().encode(JSON.stringify(failure)) };
}

/** The failure a stored record holds. */
export function readFailure(record: StoredResponse): StoredFailure {
  return JSON.parse(new TextDecoder().decode(record.body)) as StoredFailure;
}
