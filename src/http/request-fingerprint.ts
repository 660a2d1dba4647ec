/**
 * A request's fingerprint (protocol.md H7, K2) under the HTTP options (`fingerprintHeaders`,
 * `fingerprintIgnore`, `fingerprintProjection`), through the memo of recent raw requests
 * (protocol.md H29): a byte-identical retry is not parsed and canonicalised again.
 */
import { InvalidOptionError } from '../core/errors.js';
import { fingerprint, parsePointer } from '../core/fingerprint.js';
import { FINGERPRINT_MEMO_SIZE, FingerprintMemo } from './fingerprint-memo.js';
import type { HttpRequestInput, IdempotencyOptions } from './options.js';

/** No fingerprint headers configured: one shared empty list. */
const NO_VALUES: readonly string[] = [];

type FingerprintOptions = Pick<IdempotencyOptions<unknown>, 'fingerprintHeaders' | 'fingerprintIgnore' | 'fingerprintProjection' | 'fingerprintMemo'>;

/** The fingerprints of an {@link HttpIdempotency}'s requests. */
export class RequestFingerprints {
  private readonly headers: readonly string[];
  /** Fingerprints of recent raw requests (protocol.md H29), or undefined when off. */
  private readonly memo: FingerprintMemo | undefined;

  /** @throws {InvalidOptionError} for a bad pointer in `fingerprintIgnore`, a `fingerprintProjection` that is no function, a bad `fingerprintMemo` */
  constructor(private readonly options: FingerprintOptions) {
    for (const pointer of options.fingerprintIgnore ?? []) {
      try {
        parsePointer(pointer);
      } catch (error) {
        throw new InvalidOptionError(`idem: fingerprintIgnore: ${(error as Error).message}`);
      }
    }
    if (options.fingerprintProjection !== undefined && typeof options.fingerprintProjection !== 'function') {
      throw new InvalidOptionError('idem: fingerprintProjection must be a function');
    }
    this.headers = options.fingerprintHeaders ?? [];
    const size = options.fingerprintMemo ?? FINGERPRINT_MEMO_SIZE;
    if (!(Number.isInteger(size) && size >= 0)) throw new InvalidOptionError('idem: fingerprintMemo must be a whole number of requests >= 0');
    this.memo = size > 0 ? new FingerprintMemo(size) : undefined;
  }

  /**
   * The request's fingerprint (protocol.md H7), remembered by its raw parts (protocol.md H29).
   * @throws {MalformedBodyError} for a `multipart/form-data` body that does not parse (protocol.md H42)
   */
  of(request: HttpRequestInput): Uint8Array {
    const contentType = request.headers.get('content-type');
    const names = this.headers;
    const values = names.length === 0 ? NO_VALUES : names.map((h) => request.headers.get(h) ?? '');
    const memo = this.memo;
    const id = memo?.idOf({ method: request.method, url: request.url, contentType, body: request.body, headerValues: values });
    const known = id === undefined ? undefined : memo!.get(id);
    if (known !== undefined) return known;
    const url = new URL(request.url, 'http://idem.invalid');
    const print = fingerprint({
      method: request.method,
      path: url.pathname,
      query: url.searchParams,
      contentType,
      body: request.body,
      headers: names.map((h, i) => [h, values[i]!] as const),
      // A multipart body that does not parse has no canonical form: refused, not hashed (protocol.md H42).
      malformed: 'throw',
      ...(this.options.fingerprintIgnore ? { ignore: this.options.fingerprintIgnore } : {}),
      ...(this.options.fingerprintProjection ? { project: this.options.fingerprintProjection } : {}),
    });
    if (id !== undefined) memo!.set(id, print);
    return print;
  }
}
