import { dataKey } from '../core/data-key.js';
import { idemProblem, ProblemKind } from '../http/problem.js';
import type { IdempotencyContext } from '../http/context.js';
import { HttpIdempotency, type IdempotencyOptions } from '../http/idempotency.js';
import { type WebhookPreset, WebhookRefusedError } from './presets.js';

/** Options of {@link webhookReceiver}: the HTTP options (store, lease, wait mode, …) but the key, which the preset gives. */
export type WebhookOptions<Tx = unknown> = Omit<IdempotencyOptions<Tx>, 'getKey' | 'required' | 'scope' | 'keyHeader'> & {
  /**
   * The scope delivery ids live in: one per provider and endpoint (or account).
   * @default `webhook:<provider>`
   */
  scope?: string;
  /**
   * The most body bytes read from a delivery, before its signature is checked: a larger one is
   * answered 413 (`urn:idem:problem:request-too-large`), unread past the limit, nothing claimed
   * (protocol.md H27). Lower it for providers with small payloads (Stripe, Slack).
   * @default 26_214_400 (25 MiB, GitHub's cap on a delivery)
   */
  maxBodyBytes?: number;
};

/** Default `maxBodyBytes` of a receiver: 25 MiB, GitHub's cap on a delivery (the largest of the presets' providers). */
export const DEFAULT_WEBHOOK_BODY_BYTES = 25 * 1024 * 1024;

/** A webhook handler: the verified delivery (its body readable again) and idem's context (`undefined` for a signed request that is not a delivery, e.g. Slack's url_verification). */
export type WebhookHandler<Tx = unknown> = (request: Request, idem: IdempotencyContext<Tx> | undefined) => Response | Promise<Response>;

/**
 * A webhook endpoint over any fetch-style runtime (Hono, Next route handlers, Bun, Deno,
 * Cloudflare; Express through a fetch bridge). protocol.md K37: the provider's signature is
 * checked over the exact body bytes **before** the claim — a bad one is answered 401 (Stripe:
 * 400) as `application/problem+json` and claims nothing — then the delivery runs under its
 * delivery id: a redelivery of a finished one replays the stored (2xx) response without
 * running the handler; one arriving while the first runs gets 409 with `Retry-After`, or waits
 * for the result with `inProgress: { wait }`.
 *
 * @example
 * ```ts
 * const receive = webhookReceiver(github({ secret }), { store });
 * app.post('/webhooks/github', (c) => receive(c.req.raw, async (req, idem) => {
 *   const event = await req.json();
 *   await idem!.phase('recorded', (tx) => saveEvent(tx, event));
 *   return new Response(null, { status: 204 });
 * }));
 * ```
 * @throws {InvalidOptionError} at creation for bad options
 */
export function webhookReceiver<Tx = unknown>(
  preset: WebhookPreset,
  options: WebhookOptions<Tx>,
): (request: Request, handler: WebhookHandler<Tx>) => Promise<Response> {
  if (!preset || typeof preset.verify !== 'function') throw new TypeError('idem/webhooks: webhookReceiver needs a preset, e.g. github({ secret })');
  const scope = options.scope ?? `webhook:${preset.name}`;
  const ids = new WeakMap<Headers, string>();
  const core = new HttpIdempotency<Tx>({
    ...options,
    maxBodyBytes: options.maxBodyBytes ?? DEFAULT_WEBHOOK_BODY_BYTES,
    scope: () => scope,
    // protocol.md K47: a delivery id is data (a body field, a provider's header), any string;
    // an empty one is answered 400 (idempotency-key-invalid), nothing claimed.
    getKey: (input) => {
      const id = ids.get(input.headers);
      return id === undefined ? undefined : dataKey(id);
    },
    required: false,
  });
  return async function receive(request, handler) {
    // protocol.md H27: the HTTP core's limited read; past the limit, its 413 problem and no claim.
    const read = await core.readBody(request);
    if (read instanceof Response) return read;
    const body = read ?? new Uint8Array();
    let id: string | undefined;
    try {
      id = await preset.verify({ headers: request.headers, body });
    } catch (error) {
      if (!(error instanceof WebhookRefusedError)) throw error;
      // protocol.md K37: refused before the claim; nothing is consumed.
      return idemProblem(ProblemKind.WebhookRefused, preset.refusedStatus, `${error.message}.`);
    }
    const verified = new Request(request.url, { method: request.method, headers: request.headers, body: body.length > 0 ? body : null });
    if (id === undefined) return handler(verified, undefined);
    ids.set(verified.headers, id);
    return core.handle(verified, handler);
  };
}
