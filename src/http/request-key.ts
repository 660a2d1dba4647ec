/**
 * A request's idempotency key: from the key header (protocol.md H4, the draft's syntax H5), or
 * from wherever the API takes it with `getKey` (e.g. a body field): a key from data, any
 * non-empty string stored as `dataKey` maps it (protocol.md K47). Never two different ones.
 */
import { dataKey } from '../core/data-key.js';
import { InvalidKeyError, InvalidOptionError } from '../core/errors.js';
import { parseIdempotencyKey } from '../core/key.js';
import type { HttpRequestInput } from './options.js';

/** The key of a request (`undefined`: none), or why it has no valid one (the 400 problem's detail). */
export type KeyRead = { kind: 'key'; key: string | undefined } | { kind: 'invalid'; detail: string };

/** Reads the keys of an {@link HttpIdempotency}'s requests. */
export class RequestKeys {
  /**
   * @param keyHeader the key header's name (resolved: `keyHeader`, `headerName` or the default)
   * @param ignoreHeader with `getKey`, the key header is not read (a browser's own key next to a page's; protocol.md H42)
   * @throws {InvalidOptionError} for a `getKey` that is not a function, `ignoreKeyHeader` without `getKey`
   */
  constructor(
    private readonly keyHeader: string,
    private readonly getKey: ((request: HttpRequestInput) => string | undefined) | undefined,
    private readonly ignoreHeader = false,
  ) {
    if (getKey !== undefined && typeof getKey !== 'function') throw new InvalidOptionError('idem: getKey must be a function');
    if (ignoreHeader !== true && ignoreHeader !== false) throw new InvalidOptionError('idem: ignoreKeyHeader must be a boolean');
    if (ignoreHeader && getKey === undefined) throw new InvalidOptionError('idem: ignoreKeyHeader needs getKey (where else would the key come from?)');
  }

  /**
   * The request's key, or the detail of its `idempotency-key-invalid` problem.
   * @throws whatever `getKey` throws, other than an {@link InvalidKeyError} (a bug in the app; nothing was claimed)
   */
  read(request: HttpRequestInput): KeyRead {
    try {
      if (!this.getKey) return { kind: 'key', key: this.headerKey(request) };
      const found = this.getKey(request);
      // Data, not the header: any non-empty string, mapped to its stored key (protocol.md K47);
      // an empty string or a non-string is an InvalidKeyError (400, nothing claimed).
      const key = found === undefined ? undefined : dataKey(found);
      if (this.ignoreHeader) return { kind: 'key', key };
      // A key header next to the key getKey found must name the same key, as sent: two
      // different keys for one request are ambiguous, never silently ignored (protocol.md H5).
      const header = request.headers.get(this.keyHeader) !== null ? this.headerKey(request) : undefined;
      if (header !== undefined && header !== found) {
        return {
          kind: 'invalid',
          detail: `This request carries an ${this.keyHeader} header that differs from the idempotency key in its body (or wherever this API takes it from). Send one key.`,
        };
      }
      return { kind: 'key', key };
    } catch (error) {
      if (!(error instanceof InvalidKeyError)) throw error;
      return { kind: 'invalid', detail: `${error.message}.` };
    }
  }

  /** The key in the request's key header, or undefined when there is none (protocol.md H4). */
  private headerKey(request: HttpRequestInput): string | undefined {
    return parseIdempotencyKey(request.keyHeaderLines ?? request.headers.get(this.keyHeader));
  }
}
