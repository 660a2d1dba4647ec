/**
 * RFC 9457 problem details for every error idem itself produces (protocol.md H20): valid JSON,
 * `status` equal to the HTTP status, one `type` per condition. Optionally with a Stripe-style
 * `error` extension member, which Stripe's SDKs read (stripe-node resolves a non-2xx JSON
 * response without an `error` member as if it were a success).
 */

import { isSafeNewKey, OPERATION_STATE_HEADER, OperationState } from '../core/next-step.js';

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
  MalformedBody: 'request-body-malformed',
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
  'request-body-malformed': ['The request body is malformed', 'invalid_request_error', 'request_body_malformed'],
};

/**
 * The next step each condition tells a client where nothing more is known (protocol.md H41).
 * A failed attempt's problems (`request-failed-retry`, `request-failed-permanently`) are
 * worded from its execution instead: `not-applied` only when no declared effect can exist.
 */
const STATES: Record<ProblemKind, OperationState> = {
  // No key, or none read: nothing of this request was claimed or run.
  'idempotency-key-missing': OperationState.NotApplied,
  'idempotency-key-invalid': OperationState.NotApplied,
  // Refused before the key was read; a retry sends the same bytes and is refused the same way.
  'request-too-large': OperationState.NotApplied,
  // A multipart body with no canonical form is refused before the claim (protocol.md H42).
  'request-body-malformed': OperationState.NotApplied,
  'webhook-signature-invalid': OperationState.NotApplied,
  'idempotency-key-reused': OperationState.KeyMismatch,
  'request-in-progress': OperationState.MaybeApplied,
  // The store cannot say whether an earlier request with this key ran.
  'idempotency-store-unavailable': OperationState.MaybeApplied,
  'request-failed-retry': OperationState.MaybeApplied,
  'request-failed-permanently': OperationState.MaybeApplied,
  'idempotency-lease-lost': OperationState.MaybeApplied,
  'response-too-large-to-keep': OperationState.AppliedResultUnavailable,
};

/**
 * Builds an `application/problem+json` response for one of idem's conditions, with the
 * next-step signal (protocol.md H41).
 *
 * @param status the HTTP status, repeated as `status` in the body
 * @param headers extra headers, e.g. `Retry-After`
 * @param state the next step, where the caller knows more than the condition's default
 */
export function idemProblem(
  kind: ProblemKind,
  status: number,
  detail: string,
  format: ProblemFormat = {},
  headers: Record<string, string> = {},
  state?: OperationState,
): Response {
  const parts = idemProblemParts(kind, status, detail, format, headers, state);
  return new Response(parts.text, { status, headers: parts.headers });
}

/** The headers and JSON text of {@link idemProblem}, for storing one without a Response. */
export function idemProblemParts(
  kind: ProblemKind,
  status: number,
  detail: string,
  format: ProblemFormat = {},
  headers: Record<string, string> = {},
  state: OperationState = STATES[kind],
): { headers: Headers; text: string } {
  const [title, stripeType, code] = TITLES[kind];
  return problemParts(
    { type: PROBLEM_TYPE_PREFIX + kind, title, status, detail, operation_state: state, safe_new_key: isSafeNewKey(state) },
    { ...format, stripeError: { type: stripeType, code, message: detail } },
    { ...headers, [OPERATION_STATE_HEADER]: state },
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
