/**
 * The failure table (docs/guides/gateway.md "Failure table", protocol.md K50): what the gateway
 * does with the key, and answers, when the upstream gave no complete response. A proxy cannot
 * know whether an upstream that took the request applied it, so it never lets a retry start a
 * second attempt beside one that may still run: the key stays held until its lease ends, and the
 * takeover's attempt carries a higher fencing token. Only a request that cannot have reached the
 * upstream (connection refused) releases the key at once.
 */
import type { Execution } from '../engine/execution.js';
import { PROBLEM_TYPE_PREFIX, problemResponse, type ProblemFormat } from '../http/problem.js';
import type { UpstreamFault } from './upstream.js';

/** Problem types of the gateway's own answers. */
export const GatewayProblem = {
  Unreachable: `${PROBLEM_TYPE_PREFIX}upstream-unreachable`,
  OutcomeUnknown: `${PROBLEM_TYPE_PREFIX}upstream-outcome-unknown`,
  Timeout: `${PROBLEM_TYPE_PREFIX}upstream-timeout`,
  PrincipalMissing: `${PROBLEM_TYPE_PREFIX}principal-missing`,
} as const;

/**
 * Acts on the key for `fault` and returns the client's answer. `execution` is undefined for a
 * request the gateway forwarded without a claim (no route, or no key where none is required).
 */
export async function faultAnswer(fault: UpstreamFault, execution: Execution | undefined, leaseMs: number, format: ProblemFormat): Promise<Response> {
  const lease = Math.max(1, Math.ceil(leaseMs / 1000));
  if (fault.kind === 'unreachable') {
    // Nothing reached the upstream: release (recovery point kept, nothing counted), so the
    // client's retry with the same key is forwarded as soon as the upstream is back.
    await execution?.release().catch(() => undefined); // store down: the lease runs out instead
    return problemResponse(
      {
        type: GatewayProblem.Unreachable,
        title: 'The upstream could not be reached',
        status: fault.timedOut ? 504 : 502,
        detail: 'The request was not delivered to the upstream (no connection), so it was not applied. Retry with the same idempotency key.',
      },
      format,
      { 'retry-after': '1' },
    );
  }
  // The upstream may have applied it: hold the key for the rest of its lease (protocol.md K50).
  execution?.abandon();
  const held = execution
    ? ` The key stays held for up to ${lease} s; a retry with the same key after that is forwarded again, with a higher Idem-Fencing-Token.`
    : '';
  if (fault.kind === 'timeout') {
    return problemResponse(
      {
        type: GatewayProblem.Timeout,
        title: 'The upstream did not answer in time',
        status: 504,
        detail: `The upstream took the request and gave no complete response in time. It may have applied the request.${held}`,
      },
      format,
      { 'retry-after': String(lease) },
    );
  }
  return problemResponse(
    {
      type: GatewayProblem.OutcomeUnknown,
      title: 'The upstream dropped the connection',
      status: 502,
      detail: `The upstream closed or reset the connection before a complete response. It may have applied the request.${held}`,
    },
    format,
    { 'retry-after': String(lease) },
  );
}

/** 401: the route's principal is missing or was refused; nothing was claimed or forwarded. */
export function principalMissing(detail: string, format: ProblemFormat): Response {
  return problemResponse({ type: GatewayProblem.PrincipalMissing, title: 'No principal for this request', status: 401, detail }, format);
}
