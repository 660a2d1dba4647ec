/**
 * A client application as a child process, for the "killed between attempts, restarted" test.
 * Env: CLIENT_MODE `send` | `resume`, CLIENT_TARGET (base URL), CLIENT_STORE_DIR (FileIntentStore
 * directory), CLIENT_API_KEY, CLIENT_CUSTOMER.
 *
 * `send` creates one charge intent and sends it with a long backoff (60 s), printing a line
 * `retry {json}` on every retry, so the test can SIGKILL it while it waits between attempts.
 * `resume` runs `resumePending()` once and prints `resumed {json}` with each result.
 */
import { FileIntentStore, IdempotentClient } from '../../src/client/node.js';

const env = process.env;
const store = new FileIntentStore({ dir: env.CLIENT_STORE_DIR! });
const client = new IdempotentClient({
  store,
  headers: () => ({ authorization: `Bearer ${env.CLIENT_API_KEY}` }),
  baseDelayMs: 60_000,
  maxDelayMs: 60_000,
  random: () => 0.99, // always wait close to the full 60 s: the test kills us meanwhile
  attemptTimeoutMs: 20_000,
  onRetry: (event) => console.log(`retry ${JSON.stringify({ ...event, error: String(event.error) })}`),
});

if (env.CLIENT_MODE === 'send') {
  const intent = await client.createIntent(`${env.CLIENT_TARGET}/v1/charges`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ amount: 2500, currency: 'usd', customer: env.CLIENT_CUSTOMER }),
  });
  console.log(`intent ${JSON.stringify({ key: intent.key })}`);
  const res = await client.send(intent.key);
  console.log(`sent ${JSON.stringify({ status: res.status })}`);
} else {
  const results = await client.resumePending();
  const out = await Promise.all(
    results.map(async (r) =>
      r.ok
        ? {
            key: r.key,
            status: r.response.status,
            replayed: r.response.replayed,
            key2: r.response.idempotencyKey,
            attempts: r.response.attempts,
            body: await r.response.text(),
          }
        : { key: r.key, error: String(r.error) },
    ),
  );
  console.log(`resumed ${JSON.stringify(out)}`);
}
