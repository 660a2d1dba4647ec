/**
 * Any fetch-style runtime (a `fetch(request)` export: Bun, Deno, workers, a custom server) through
 * the web-standard core, and a job protected by the engine alone, with no HTTP at all.
 *
 * Run by test/guide-examples.test.ts (on PGlite).
 */
import { fingerprint, HttpIdempotency, IdempotencyEngine } from 'idem';
import type { PostgresStore } from 'idem/postgres';

// #region fetch
/** `export default worker(store)`: a `fetch` handler; the context is the handler's 2nd argument. */
export function worker(store: PostgresStore) {
  const http = new HttpIdempotency({ store });
  return {
    fetch: (request: Request) =>
      http.handle(request, async (_req, idem) => {
        const result = idem ? await idem.phase('work', async (tx) => (await tx.query('SELECT 1 AS one')).rows[0]) : undefined;
        return Response.json({ done: true, result }, { status: 201 });
      }),
  };
}
// #endregion fetch

// #region job
/** Runs `sendInvoice` once per message id, however often the message is delivered. */
export async function invoiceJob(store: PostgresStore, message: { id: string; body: Uint8Array }, sendInvoice: (tx: unknown) => Promise<void>) {
  const engine = new IdempotencyEngine({ store });
  const begun = await engine.begin({ scope: 'billing', key: message.id, fingerprint: fingerprint({ method: 'JOB', path: 'invoice', body: message.body }) });
  if (begun.kind === 'execute') {
    await begun.execution.finish(async (tx) => {
      await sendInvoice(tx);
      return { status: 200, headers: [], body: new Uint8Array() };
    });
  }
  return begun.kind; // 'execute' the first time; 'replay' once done; 'in-progress' or 'mismatch' otherwise
}
// #endregion job
