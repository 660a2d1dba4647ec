/**
 * A `getKey` that reads the idempotency key from a form field the page set itself, a hidden
 * `<input>` (protocol.md H42): urlencoded or multipart, the same key on a reload and on a second
 * submit of the same page, with or without the browser's own `Idempotency-Key`.
 */
import { InvalidKeyError } from '../core/errors.js';
import { MalformedBodyError } from '../core/multipart.js';
import { mediaType } from '../core/fingerprint.js';
import { parseMultipart } from '../core/multipart.js';
import type { HttpRequestInput } from './options.js';

/** A fatal UTF-8 decoder for the field's value. */
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * `getKey` for a form whose page carries its key in the field `name`, e.g.
 * `<input type="hidden" name="idempotency_key" value="…">`. A request that is no form, or has no
 * such field, has no key (`undefined`). Pair it with `ignoreKeyHeader: true` where browsers add
 * their own key (Firefox's `network.http.idempotencyKey.enabled`).
 *
 * @throws {InvalidKeyError} for a multipart body that does not parse, or a field that is not UTF-8 (400, nothing claimed)
 */
export function formFieldKey(name: string): (request: HttpRequestInput) => string | undefined {
  return (request) => {
    const body = request.body;
    if (!body || body.length === 0) return undefined;
    const contentType = request.headers.get('content-type') ?? '';
    const type = mediaType(contentType);
    try {
      if (type === 'application/x-www-form-urlencoded') return new URLSearchParams(utf8.decode(body)).get(name) ?? undefined;
      if (type === 'multipart/form-data') {
        const part = parseMultipart(contentType, body).find((p) => p.name === name && p.filename === null);
        return part === undefined ? undefined : utf8.decode(part.content);
      }
    } catch (error) {
      const why = error instanceof MalformedBodyError ? error.message : 'the form is not UTF-8';
      throw new InvalidKeyError(`idem: no key field ${JSON.stringify(name)} can be read: ${why}`);
    }
    return undefined;
  };
}
