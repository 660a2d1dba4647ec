export { HttpIdempotency, type HttpRequestInput, type IdempotencyOptions, type Prepared } from './idempotency.js';
export { IdempotencyContext } from './context.js';
export { idemProblem, problemResponse, ProblemKind, PROBLEM_TYPE_PREFIX, type ProblemDetails, type ProblemFormat, type StripeError } from './problem.js';
export { captureResponse, replayResponse, replayHeaderFilter } from './response.js';
export { credentialScope, PUBLIC_SCOPE } from './scope.js';
export { Completer, type CompleterOptions, type CompleterReport } from './completer.js';
