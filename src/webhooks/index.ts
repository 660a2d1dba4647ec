/**
 * `idem/webhooks`: webhook receivers for Stripe, GitHub, Shopify, Slack, Adyen and Standard
 * Webhooks (Svix): each preset knows where the provider puts its delivery id and checks its
 * signature before anything is claimed (protocol.md K37). See docs/guides/webhooks.md.
 */
export { webhookReceiver, type WebhookHandler, type WebhookOptions } from './receiver.js';
export {
  adyen,
  github,
  shopify,
  slack,
  standardWebhooks,
  stripe,
  type StandardWebhookVerifierLike,
  type StripeWebhooksLike,
  type Verifier,
  type WebhookDelivery,
  type WebhookPreset,
  WebhookRefusedError,
} from './presets.js';
