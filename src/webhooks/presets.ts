/**
 * Webhook providers: where each puts its delivery id, and how each signs a delivery. Signatures
 * are checked over the exact body bytes with node:crypto where the provider documents an HMAC
 * (GitHub, Shopify, Slack, Adyen), or by the provider's own library (Stripe's SDK, the
 * `standardwebhooks` / `svix` verifier), or by the application's verifier (`verify`) for any.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { ErrorCode, IdempotencyError } from '../core/errors.js';

/** A delivery as a preset sees it: the exact body bytes and the headers. */
export interface WebhookDelivery {
  headers: Headers;
  body: Uint8Array;
}

/** Thrown by a preset when a delivery's signature is missing, wrong or stale; nothing is claimed. */
export class WebhookRefusedError extends IdempotencyError {
  constructor(message: string) {
    super(ErrorCode.WebhookRefused, message);
  }
}

/** A provider: its name (the default scope), the status it expects for a refused delivery, its check and id. */
export interface WebhookPreset {
  name: string;
  /** The status a refused delivery gets (Stripe's docs: 400; the others 401). */
  refusedStatus: 400 | 401;
  /**
   * Checks the delivery's signature and returns its delivery id (the idempotency key: any
   * non-empty string, mapped into the stored keys as protocol.md K47 says), or `undefined` for
   * a signed request that is not a delivery to deduplicate (Slack's `url_verification`).
   * Throws {@link WebhookRefusedError} for a bad signature.
   */
  verify(delivery: WebhookDelivery): Promise<string | undefined>;
}

/** An application's own signature check, in place of the preset's: true when the delivery is genuine. */
export type Verifier = (delivery: WebhookDelivery) => boolean | Promise<boolean>;

const utf8 = new TextDecoder();

function hmac(algorithm: 'sha256', key: string | Buffer, data: string | Uint8Array): Buffer {
  return createHmac(algorithm, key).update(data).digest();
}

/** Constant-time comparison of two byte strings of possibly different lengths. */
function same(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

async function checked(delivery: WebhookDelivery, verify: Verifier | undefined, builtIn: () => boolean, what: string): Promise<void> {
  const ok = verify ? await verify(delivery) : builtIn();
  if (!ok) throw new WebhookRefusedError(`${what} signature is missing or invalid`);
}

function header(delivery: WebhookDelivery, name: string): string {
  const value = delivery.headers.get(name);
  if (!value) throw new WebhookRefusedError(`the ${name} header is missing`);
  return value;
}

function json(delivery: WebhookDelivery): Record<string, unknown> {
  try {
    return JSON.parse(utf8.decode(delivery.body)) as Record<string, unknown>;
  } catch {
    throw new WebhookRefusedError('the body is not JSON');
  }
}

function secretOrVerify(options: { secret?: string; verify?: Verifier }, provider: string): void {
  if (!options || (typeof options.secret !== 'string' && typeof options.verify !== 'function')) {
    throw new TypeError(`idem/webhooks: ${provider}() needs { secret } or { verify }`);
  }
}

/** A provider that signs the body with an HMAC in a header and names the delivery in another header. */
function headerPreset(
  name: string,
  options: { secret?: string; verify?: Verifier },
  signed: (delivery: WebhookDelivery, secret: string) => boolean,
  idHeader: string,
): WebhookPreset {
  secretOrVerify(options, name);
  return {
    name,
    refusedStatus: 401,
    async verify(delivery) {
      await checked(delivery, options.verify, () => signed(delivery, options.secret!), name);
      return header(delivery, idHeader);
    },
  };
}

/**
 * GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`; the key is
 * `X-GitHub-Delivery` (the same on a redelivery).
 */
export function github(options: { secret?: string; verify?: Verifier }): WebhookPreset {
  return headerPreset(
    'github',
    options,
    (delivery, secret) =>
      same(Buffer.from(header(delivery, 'x-hub-signature-256')), Buffer.from(`sha256=${hmac('sha256', secret, delivery.body).toString('hex')}`)),
    'x-github-delivery',
  );
}

/** Shopify: `X-Shopify-Hmac-Sha256: <base64 HMAC-SHA256 of the body>`; the key is `X-Shopify-Webhook-Id`. */
export function shopify(options: { secret?: string; verify?: Verifier }): WebhookPreset {
  return headerPreset(
    'shopify',
    options,
    (delivery, secret) => same(Buffer.from(header(delivery, 'x-shopify-hmac-sha256'), 'base64'), hmac('sha256', secret, delivery.body)),
    'x-shopify-webhook-id',
  );
}

/**
 * Slack (Events API): `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<X-Slack-Request-Timestamp>:<body>">`,
 * refused when the timestamp is more than `toleranceSec` away; the key is the body's `event_id`.
 * A `url_verification` request (no `event_id`) runs unprotected.
 */
export function slack(options: { signingSecret?: string; verify?: Verifier; toleranceSec?: number; now?: () => number }): WebhookPreset {
  secretOrVerify({ secret: options?.signingSecret, verify: options?.verify }, 'slack');
  const tolerance = options.toleranceSec ?? 300;
  const now = options.now ?? Date.now;
  return {
    name: 'slack',
    refusedStatus: 401,
    async verify(delivery) {
      await checked(
        delivery,
        options.verify,
        () => {
          const timestamp = header(delivery, 'x-slack-request-timestamp');
          if (!/^\d+$/.test(timestamp) || Math.abs(now() / 1000 - Number(timestamp)) > tolerance) return false;
          const base = Buffer.concat([Buffer.from(`v0:${timestamp}:`), delivery.body]);
          const expected = `v0=${hmac('sha256', options.signingSecret!, base).toString('hex')}`;
          return same(Buffer.from(header(delivery, 'x-slack-signature')), Buffer.from(expected));
        },
        'Slack',
      );
      const id = json(delivery).event_id;
      return typeof id === 'string' ? id : undefined;
    },
  };
}

/** The slice of Stripe's SDK used: `stripe.webhooks`. */
export interface StripeWebhooksLike {
  constructEventAsync(payload: string | Buffer, header: string, secret: string, tolerance?: number): Promise<{ id: string }>;
}

/**
 * Stripe: the SDK's `stripe.webhooks.constructEventAsync` checks `Stripe-Signature` (with its
 * timestamp tolerance); the key is the event's `id` (`evt_…`, the same on every retry). Or the
 * application's `verify`.
 */
export function stripe(options: { webhooks: StripeWebhooksLike; secret: string; toleranceSec?: number } | { verify: Verifier }): WebhookPreset {
  if (!options || (!('verify' in options) && !(options.webhooks && typeof options.secret === 'string'))) {
    throw new TypeError('idem/webhooks: stripe() needs { webhooks: stripe.webhooks, secret } or { verify }');
  }
  return {
    name: 'stripe',
    refusedStatus: 400,
    async verify(delivery) {
      if ('verify' in options) {
        await checked(delivery, options.verify, () => false, 'Stripe');
        const id = json(delivery).id;
        if (typeof id !== 'string') throw new WebhookRefusedError('the event has no id');
        return id;
      }
      try {
        const event = await options.webhooks.constructEventAsync(
          Buffer.from(delivery.body),
          header(delivery, 'stripe-signature'),
          options.secret,
          options.toleranceSec,
        );
        return event.id;
      } catch (error) {
        throw new WebhookRefusedError(`Stripe signature is missing or invalid: ${(error as Error).message}`);
      }
    },
  };
}

interface AdyenItem {
  NotificationRequestItem?: {
    additionalData?: { hmacSignature?: string };
    amount?: { currency?: string; value?: number };
    eventCode?: string;
    merchantAccountCode?: string;
    merchantReference?: string;
    originalReference?: string;
    pspReference?: string;
    success?: string;
  };
}

/**
 * Adyen (standard notifications): every item's `additionalData.hmacSignature` is the base64
 * HMAC-SHA256, under the hex `hmacKey`, of `pspReference:originalReference:merchantAccountCode:
 * merchantReference:value:currency:eventCode:success`; the key is `eventCode:pspReference` of
 * the items. Answer `[accepted]` from the handler, as Adyen asks.
 */
export function adyen(options: { hmacKey?: string; verify?: Verifier }): WebhookPreset {
  secretOrVerify({ secret: options?.hmacKey, verify: options?.verify }, 'adyen');
  return {
    name: 'adyen',
    refusedStatus: 401,
    async verify(delivery) {
      const items = ((json(delivery).notificationItems ?? []) as AdyenItem[]).map((i) => i.NotificationRequestItem ?? {});
      if (items.length === 0) throw new WebhookRefusedError('the notification has no items');
      await checked(
        delivery,
        options.verify,
        () =>
          items.every((item) => {
            const data = [
              item.pspReference ?? '',
              item.originalReference ?? '',
              item.merchantAccountCode ?? '',
              item.merchantReference ?? '',
              String(item.amount?.value ?? ''),
              item.amount?.currency ?? '',
              item.eventCode ?? '',
              item.success ?? '',
            ].join(':');
            const sent = Buffer.from(item.additionalData?.hmacSignature ?? '', 'base64');
            return same(sent, hmac('sha256', Buffer.from(options.hmacKey!, 'hex'), data));
          }),
        'Adyen',
      );
      return items.map((item) => `${item.eventCode}:${item.pspReference}`).join(',');
    },
  };
}

/** The slice of a Standard Webhooks verifier: `new Webhook(secret)` from `standardwebhooks` or `svix`. */
export interface StandardWebhookVerifierLike {
  verify(payload: string, headers: Record<string, string>): unknown;
}

/**
 * Standard Webhooks (and Svix, which uses `svix-*` header names): the verifier checks
 * `webhook-signature` over `webhook-id.webhook-timestamp.body` with its timestamp tolerance;
 * the key is `webhook-id` (`svix-id`).
 */
export function standardWebhooks(options: { verifier: StandardWebhookVerifierLike } | { verify: Verifier }): WebhookPreset {
  if (!options || (!('verify' in options) && typeof options.verifier?.verify !== 'function')) {
    throw new TypeError('idem/webhooks: standardWebhooks() needs { verifier: new Webhook(secret) } or { verify }');
  }
  return {
    name: 'standard-webhooks',
    refusedStatus: 401,
    async verify(delivery) {
      if ('verify' in options) await checked(delivery, options.verify, () => false, 'Standard Webhooks');
      else {
        const headers: Record<string, string> = {};
        delivery.headers.forEach((value, name) => {
          headers[name] = value;
        });
        try {
          options.verifier.verify(utf8.decode(delivery.body), headers);
        } catch (error) {
          throw new WebhookRefusedError(`Standard Webhooks signature is missing or invalid: ${(error as Error).message}`);
        }
      }
      return delivery.headers.get('webhook-id') ?? header(delivery, 'svix-id');
    },
  };
}
