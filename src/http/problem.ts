/**
 * RFC 9457 problem details for every error idem itself produces (protocol.md H20): valid JSON,
 * `status` equal to the HTTP status, one `type` per condition. Optionally with a Stripe-style
 * `error` extension member, which Stripe's SDKs read (stripe-node resolves a non-2xx JSON
 * response without an `error` member as if it were a success).
 */

/** The conditions idem reports, each with its own problem `type`. */
export const ProblemKind = {
  MissingKey: 'idempotency-key-missing',
  InvalidKey: 'idempotency-key-invalid',
  KeyReused: 'idempotency-key-reused',
  InProgress: 'request-in-progress',
  StoreUnavailable: 'idempotency-store-unavailable',
  ExecutionFailed: 'request-failed-retry',
  FailedPermanently: 'request-failed-permanently',
  LeaseLost: 'idempotency-lease-lost',
  ResponseTooLarge: 'response-too-large-to-keep',
  WebhookRefused: 'webhook-signature-invalid',
  RequestTooLarge: 'request-too-large',
} as const;
export type ProblemKind = (typeof ProblemKind)[keyof typeof ProblemKind];

/** Prefix of every problem `type` URI idem emits; the kind follows it. */
export const PROBLEM_TYPE_PREFIX = 'urn:idem:problem:';

/** A problem details object (RFC 9457 §3) with extension members. */
export interface ProblemDetails {
  type: string;
  title: string;
  status: number;
  detail?: string;
  instance?: string;
  [extension: string]: unknown;
}

/** Stripe's error object (`{ error: { type, code, message } }`). */
export interface StripeError {
  type: 'invalid_request_error' | 'idempotency_error' | 'api_error' | 'card_error' | 'authentication_error' | 'rate_limit_error';
  code?: string;
  message: string;
  param?: string;
}

/** How idem writes its error bodies. */
export interface ProblemFormat {
  /** Add Stripe's `error` member next to the RFC 9457 fields. @default false */
  stripe?: boolean;
  /** When set, every problem carries `Link: <docsUrl>; rel="describedby"` (RFC 9457 §3.1.1). */
  docsUrl?: string;
}

const TITLES: Record<ProblemKind, [string, StripeError['type'], string]> = {
  'idempotency-key-missing': ['Idempotency-Key header required', 'invalid_request_error', 'idempotency_key_missing'],
  'idempotency-key-invalid': ['Invalid Idempotency-Key', 'invalid_request_error', 'idempotency_key_invalid'],
  'idempotency-key-reused': ['Idempotency-Key reused with a different request', 'idempotency_error', 'idempotency_key_reused'],
  'request-in-progress': ['A request with this Idempotency-Key is in progress', 'idempotency_error', 'idempotency_key_in_use'],
  'idempotency-store-unavailable': ['Idempotency store unavailable', 'api_error', 'idempotency_store_unavailable'],
  'request-failed-retry': ['The request failed; retry it with the same Idempotency-Key', 'api_error', 'request_failed_retry'],
  'request-failed-permanently': ['The request failed on every attempt; it will not be tried again', 'api_error', 'request_failed_permanently'],
  'idempotency-lease-lost': ['Another attempt took over this request', 'idempotency_error', 'idempotency_lease_lost'],
  'response-too-large-to-keep': ['The response was too large to keep for replay', 'api_error', 'response_too_large_to_keep'],
  'webhook-signature-invalid': ['The webhook signature is missing or invalid', 'authentication_error', 'webhook_signature_invalid'],
  'request-too-large': ['The request body is too large', 'invalid_request_error', 'request_too_large'],
};

/**
 * Builds an `application/problem+json` response for one of idem's conditions.
 *
 * @param status the HTTP status, repeated as `status` in the body
 * @param headers extra headers, e.g. `Retry-After`
 */
export function idemProblem(kind: ProblemKind, status: number, detail: string, format: ProblemFormat = {}, headers: Record<string, string> = {}): Response {
  const parts = idemProblemParts(kind, status, detail, format, headers);
  return new Response(parts.text, { status, headers: parts.headers });
}

/** The headers and JSON text of {@link idemProblem}, for storing one without a Response. */
export function idemProblemParts(
  kind: ProblemKind,
  status: number,
  detail: string,
  format: ProblemFormat = {},
  headers: Record<string, string> = {},
): { headers: Headers; text: string } {
  const [title, stripeType, code] = TITLES[kind];
  return problemParts(
    { type: PROBLEM_TYPE_PREFIX + kind, title, status, detail },
    { ...format, stripeError: { type: stripeType, code, message: detail } },
    headers,
  );
}

/**
 * Builds any `application/problem+json` response (also for the application's own errors,
 * so that all errors an API returns share one shape).
 *
 * @param format `stripe: true` adds `error` (from `stripeError`, or derived from the problem)
 */
export function problemResponse(
  problem: ProblemDetails,
  format: ProblemFormat & { stripeError?: StripeError } = {},
  headers: Record<string, string> = {},
): Response {
  const parts = problemParts(problem, format, headers);
  return new Response(parts.text, { status: problem.status, headers: parts.headers });
}

function problemParts(
  problem: ProblemDetails,
  format: ProblemFormat & { stripeError?: StripeError },
  headers: Record<string, string>,
): { headers: Headers; text: string } {
  const body: ProblemDetails = { ...problem };
  if (format.stripe) {
    body.error = format.stripeError ?? {
      type: problem.status >= 500 ? 'api_error' : 'invalid_request_error',
      message: problem.detail ?? problem.title,
    };
  }
  const h = new Headers(headers);
  h.set('content-type', 'application/problem+json');
  if (format.docsUrl) h.set('link', `<${format.docsUrl}>; rel="describedby"`);
  return { headers: h, text: JSON.stringify(body) };
}
