/**
 * The one check of an idem problem response (protocol.md H20: RFC 9457 problem details),
 * whatever client read it: fetch (test/helpers/http.ts) or node:http (test/helpers/payments/api.ts).
 */
import assert from 'node:assert/strict';

/** The prefix of every idem problem type. */
export const PROBLEM = 'urn:idem:problem:';

/** An idem problem body. */
export type ProblemBody = Record<string, unknown> & { type: string; status: number; title: string };

/**
 * Asserts a problem response: the HTTP `status`, a `application/problem+json` content type, a
 * JSON body whose `status` equals the HTTP status, whose `type` is `type` (a full URI) and
 * whose `title` is a non-empty string. `message` prefixes every failure.
 * @returns the parsed body
 */
export function checkProblem(
  response: { status: number; contentType: string | null | undefined; text: string },
  status: number,
  type: string,
  message = '',
): ProblemBody {
  assert.equal(response.status, status, `${message} expected ${status} ${type}, got ${response.status}: ${response.text}`);
  assert.match(String(response.contentType), /^application\/problem\+json/, `${message} content type`);
  const body = JSON.parse(response.text) as ProblemBody;
  assert.equal(body.status, status, `${message} problem status equals the HTTP status`);
  assert.equal(body.type, type, message);
  assert.equal(typeof body.title, 'string', message);
  assert.ok(body.title.length > 0, `${message} problem title is not empty`);
  return body;
}
