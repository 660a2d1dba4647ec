/**
 * Operator actions inside your own app, on any store (the `idem` CLI and dashboard cover
 * PostgreSQL): an admin route that releases a stuck key or forgets a finished one, behind your
 * own authentication, recorded on the key's row and reported as the span `idem.operator`.
 */
// #region admin
import { Hono } from 'hono';
import { forgetKey, releaseKey } from 'idem/operator';
import { openTelemetry } from 'idem/otel';
import type { IdempotencyStore } from 'idem';

export async function adminRoutes(store: IdempotencyStore<unknown>, isAdmin: (authorization: string | undefined) => string | undefined) {
  const telemetry = await openTelemetry();
  const admin = new Hono();
  admin.post('/admin/keys/:action', async (c) => {
    const operator = isAdmin(c.req.header('authorization'));
    if (!operator) return c.json({ error: 'admins only' }, 403);
    const { scope, key, token, force, reason } = await c.req.json<{ scope: string; key: string; token?: number; force?: boolean; reason?: string }>();
    const options = { by: operator, reason, token, force, telemetry };
    const action = c.req.param('action');
    if (action !== 'release' && action !== 'forget') return c.json({ error: 'release or forget' }, 404);
    const outcome = action === 'release' ? await releaseKey(store, scope, key, options) : await forgetKey(store, scope, key, options);
    // Done: what happened, with the key's new token. Refused: why, and nothing changed.
    return c.json(outcome, outcome.done ? 200 : outcome.refusal === 'absent' ? 404 : 409);
  });
  return admin;
}
// #endregion admin
