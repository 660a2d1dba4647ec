/**
 * idem/client in Node: one key per user intent, persisted (fsync'd) before the first attempt,
 * the same key and body bytes on every retry, also after a restart (`resumePending`). Browsers:
 * `LocalStorageIntentStore` / `IndexedDbIntentStore` from 'idem/client'. Run against the example
 * API by examples/client/demo.ts.
 */
import { FileIntentStore, IdempotentClient } from 'idem/client/node';

export async function chargeOnce(apiUrl: string, apiKey: string) {
  const client = new IdempotentClient({
    store: new FileIntentStore({ dir: '.intents' }), // one fsync'd file per intent (write-file-atomic)
    headers: () => ({ authorization: `Bearer ${apiKey}` }), // sent on every attempt, never persisted
    serverRetentionMs: 24 * 3600_000, // the server's retention; the horizon must stay below it
    onRetry: (e) => console.warn('retry', e),
    // The server's next-step signal (Idem-Operation-State): a new key only where no effect can exist.
    newKeyWhenSafe: true,
    onGiveUp: (e) => console.error('gave up', e.reason, 'operation state:', e.operationState ?? 'unknown'),
  });
  await client.resumePending(); // at start-up: finish what a crash interrupted

  const res = await client.fetch(`${apiUrl}/v1/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 1999, currency: 'usd', customer: 'cus_alice' }),
  });
  // `maybe-applied` or `applied-result-unavailable`: never resend under a new key; check the charge first.
  if (!res.ok && !res.safeNewKey) console.warn('charge', res.idempotencyKey, 'may have been applied:', res.operationState);
  return { status: res.status, replayed: res.replayed, key: res.idempotencyKey, attempts: res.attempts, operationState: res.operationState }; // a fetch Response, plus these
}
