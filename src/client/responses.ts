/** What the client does with a response: read it whole, mark it, and the small helpers of its retry loop. */
import { REPLAYED_HEADER } from '../core/constants.js';
import { isSafeNewKey, OPERATION_STATE_HEADER, type OperationState, parseOperationState } from '../core/next-step.js';
import type { IdempotentResponse } from './options.js';

/** Statuses whose Response may not carry a body (Fetch standard, "null body status"). */
export const NULL_BODY_STATUSES = new Set([101, 103, 204, 205, 304]);

/** One attempt's result: a response (body read), or the network error or timeout. */
export type Outcome = { response: Response } | { error: unknown };

/** True when the server marked the response as a replay (`Idempotent-Replayed: true`). */
export function isReplay(response: Response): boolean {
  return response.headers.get(REPLAYED_HEADER)?.trim().toLowerCase() === 'true';
}

/** The server's next-step signal on `response` (protocol.md H41), or `undefined`. */
export function operationStateOf(response: Response): OperationState | undefined {
  return parseOperationState(response.headers.get(OPERATION_STATE_HEADER));
}

/**
 * True when the key is spent on an outcome that applied nothing: a replayed failure the server
 * marked `not-applied`. Only then may the client renew the key (`newKeyWhenSafe`).
 */
export function spentButNotApplied(response: Response): boolean {
  return !response.ok && isReplay(response) && isSafeNewKey(operationStateOf(response));
}

/** The response with the client's fields (`replayed`, `idempotencyKey`, `attempts`, the next step) added. */
export function decorate(response: Response, key: string | null, attempts: number): IdempotentResponse {
  const operationState = operationStateOf(response);
  return Object.defineProperties(response, {
    replayed: { value: isReplay(response), enumerable: true },
    idempotencyKey: { value: key, enumerable: true },
    attempts: { value: attempts, enumerable: true },
    operationState: { value: operationState, enumerable: true },
    safeNewKey: { value: isSafeNewKey(operationState), enumerable: true },
  }) as IdempotentResponse;
}

/** A fresh Response over bytes already read (status, status text and headers kept). */
export function rebuild(response: Response, bytes: Uint8Array): Response {
  const body = NULL_BODY_STATUSES.has(response.status) ? null : bytes;
  return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
}

/** Calls an observer hook; a throwing hook must not break the retry loop. */
export function notify<E>(hook: ((event: E) => void) | undefined, event: E): void {
  if (!hook) return;
  try {
    hook(event);
  } catch {
    // Observers only observe.
  }
}

/** Waits `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
