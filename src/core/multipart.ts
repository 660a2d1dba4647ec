/**
 * The canonical form of a `multipart/form-data` body (protocol.md H42): its parts by name,
 * filename, content type and content, without the boundary string. A browser picks a new random
 * boundary each time it posts a form (Firefox re-posts a reloaded form with another one), so the
 * raw bytes of two posts of the same form never match; their parts do.
 */
import { createHash } from 'node:crypto';
import { ErrorCode, IdempotencyError } from './errors.js';

/**
 * A request body that says it is `multipart/form-data` does not parse as one (no boundary, no
 * closing delimiter, a part without `Content-Disposition: form-data; name=…`): it has no
 * canonical fingerprint (protocol.md H42). Thrown before anything is claimed; over HTTP it is
 * the 400 problem `request-body-malformed`.
 */
export class MalformedBodyError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.MalformedBody, message);
  }
}

/** One part of a form, as the canonical form sees it. */
export interface FormPart {
  /** The `name` of its `Content-Disposition: form-data`, byte for byte (latin1). */
  name: string;
  /** Its `filename`, or null when the part has none (a text field); `""` is an empty file input. */
  filename: string | null;
  /** Its `Content-Type`, lower-cased, spaces around `;` removed; `text/plain` when absent (RFC 7578 §4.4). */
  contentType: string;
  /** Its content, exactly (a view into the body). */
  content: Uint8Array;
}

/** RFC 2046 §5.1.1: 1-70 characters of bchars, not ending in a space. */
const BOUNDARY = /^[0-9A-Za-z'()+_,\-./:=? ]{0,69}[0-9A-Za-z'()+_,\-./:=?]$/;

/**
 * The `boundary` parameter of a `multipart/form-data` Content-Type.
 * @throws {MalformedBodyError} when it is missing or not a valid boundary
 */
export function multipartBoundary(contentType: string): string {
  const match = /;\s*boundary\s*=\s*(?:"([^"]*)"|([^;\s]*))/i.exec(contentType);
  const boundary = match ? (match[1] ?? match[2] ?? '') : '';
  if (!BOUNDARY.test(boundary)) {
    throw new MalformedBodyError(
      match
        ? 'multipart/form-data: the boundary parameter is not a valid boundary (RFC 2046)'
        : 'multipart/form-data: the Content-Type has no boundary parameter',
    );
  }
  return boundary;
}

const CRLF = Buffer.from('\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

/**
 * The parts of a `multipart/form-data` body, in order. The preamble and the epilogue are
 * ignored (RFC 2046 §5.1.1), and of each part's headers only `Content-Disposition` and
 * `Content-Type` count (RFC 7578 §4.7 retires the others).
 * @throws {MalformedBodyError} for a body that is not multipart with this boundary
 */
export function parseMultipart(contentType: string, body: Uint8Array): FormPart[] {
  const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  const boundary = multipartBoundary(contentType);
  const dash = Buffer.from(`--${boundary}`, 'latin1');
  const delimiter = Buffer.from(`\r\n--${boundary}`, 'latin1');
  let at: number;
  if (bytes.subarray(0, dash.length).equals(dash)) at = dash.length;
  else {
    const first = bytes.indexOf(delimiter);
    if (first < 0) throw new MalformedBodyError('multipart/form-data: the body has no delimiter with its boundary');
    at = first + delimiter.length;
  }
  const parts: FormPart[] = [];
  for (;;) {
    if (bytes[at] === 0x2d && bytes[at + 1] === 0x2d) return parts; // the close delimiter: the rest is epilogue
    while (bytes[at] === 0x20 || bytes[at] === 0x09) at++; // transport padding
    if (!(bytes[at] === 0x0d && bytes[at + 1] === 0x0a)) throw new MalformedBodyError('multipart/form-data: a delimiter is not followed by a line break');
    const start = at + 2;
    const end = bytes.indexOf(delimiter, start);
    if (end < 0) throw new MalformedBodyError('multipart/form-data: the body ends before its close delimiter');
    parts.push(parsePart(bytes.subarray(start, end)));
    at = end + delimiter.length;
  }
}

function parsePart(part: Buffer): FormPart {
  // A part with no headers starts with the blank line; it then has no Content-Disposition either.
  const bare = part.subarray(0, CRLF.length).equals(CRLF);
  const split = bare ? 0 : part.indexOf(HEADERS_END);
  if (split < 0) throw new MalformedBodyError('multipart/form-data: a part has no blank line after its headers');
  const head = part.subarray(0, split).toString('latin1');
  const content = part.subarray(bare ? CRLF.length : split + HEADERS_END.length);
  let disposition: string | undefined;
  let type: string | undefined;
  for (const line of bare ? [] : head.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon <= 0) throw new MalformedBodyError('multipart/form-data: a part has a header line without a name');
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-disposition') disposition = value;
    else if (name === 'content-type') type = value;
  }
  if (disposition === undefined || !/^form-data\s*(;|$)/i.test(disposition)) {
    throw new MalformedBodyError('multipart/form-data: a part has no Content-Disposition: form-data header');
  }
  const name = parameter(disposition, 'name');
  if (name === null) throw new MalformedBodyError('multipart/form-data: a part has no name');
  return {
    name,
    filename: parameter(disposition, 'filename'),
    contentType: type === undefined ? 'text/plain' : type.toLowerCase().replace(/\s*;\s*/g, ';'),
    content,
  };
}

/** A parameter of a Content-Disposition value: quoted (browsers percent-encode `"` in it, HTML's form encoding) or a token. */
function parameter(value: string, name: string): string | null {
  const match = new RegExp(`;\\s*${name}\\s*=\\s*(?:"([^"]*)"|([^;\\s]*))`, 'i').exec(value);
  return match ? (match[1] ?? match[2] ?? '') : null;
}

/**
 * The canonical form of a multipart body: SHA-256 over its parts, sorted by name (stable, so
 * repeated names keep their order, as form pairs do), each as length-prefixed name, filename
 * (with a flag for none), content type and content. The boundary is in none of them.
 * @throws {MalformedBodyError} for a body that does not parse
 */
export function canonicalMultipart(contentType: string, body: Uint8Array): Uint8Array {
  const parts = parseMultipart(contentType, body)
    .map((p, i) => [p, i] as const)
    .sort((a, b) => (a[0].name < b[0].name ? -1 : a[0].name > b[0].name ? 1 : a[1] - b[1]))
    .map(([p]) => p);
  const hash = createHash('sha256');
  const length = Buffer.alloc(4);
  const field = (bytes: Uint8Array) => {
    length.writeUInt32BE(bytes.length, 0);
    hash.update(length).update(bytes);
  };
  length.writeUInt32BE(parts.length, 0);
  hash.update(length);
  for (const part of parts) {
    field(Buffer.from(part.name, 'latin1'));
    hash.update(part.filename === null ? '0' : '1');
    field(Buffer.from(part.filename ?? '', 'latin1'));
    field(Buffer.from(part.contentType, 'latin1'));
    field(part.content);
  }
  return new Uint8Array(hash.digest());
}
