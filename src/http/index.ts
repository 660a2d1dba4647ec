/**
 * `idem/http`: the web-standard HTTP core and the pieces it is made of, for writing an adapter
 * for another framework: `HttpIdempotency` (prepare, complete, fail), response capture and
 * replay, the replayed-header filter, problem details, the credential scope and the completer.
 * The hono and express adapters (`idem/hono`, `idem/express`) are built from these alone.
 */
export { HttpIdempotency, type HttpRequestInput, type IdempotencyOptions, type Prepared } from './idempotency.js';
export type { IdempotencyContext } from './context.js';
export { idemProblem, problemResponse, ProblemKind, PROBLEM_TYPE_PREFIX, type ProblemDetails, type ProblemFormat, type StripeError } from './problem.js';
export { captureResponse, replayResponse, replayHeaderFilter, type ResponseCapture } from './response.js';
export { credentialScope, PUBLIC_SCOPE } from './scope.js';
export { Completer, type CompleterOptions, type CompleterReport } from './completer.js';
export { formFieldKey } from './form-key.js';
