/**
 * Webhook receivers on Hono (docs/guides/webhooks.md): Stripe through its SDK's verifier, GitHub
 * and Shopify with their HMACs, Standard Webhooks through `standardwebhooks`. Each provider's
 * delivery id is the key, checked after the signature and before anything is claimed; a
 * redelivery replays the first 2xx. Run by test/webhooks.test.ts.
 */
import { Hono } from 'hono';
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import type { PostgresStore, Queryable } from 'idem/postgres';
import { github, shopify, standardWebhooks, stripe, webhookReceiver } from 'idem/webhooks';

export interface Secrets {
  stripeKey: string;
  stripeWebhookSecret: string;
  github: string;
  shopify: string;
  standardWebhooks: string;
}

// #region app
export function webhookApp(store: PostgresStore, secrets: Secrets) {
  const app = new Hono();
  const stripeClient = new Stripe(secrets.stripeKey);

  const fromStripe = webhookReceiver<Queryable>(stripe({ webhooks: stripeClient.webhooks, secret: secrets.stripeWebhookSecret }), { store });
  app.post('/webhooks/stripe', (c) =>
    fromStripe(c.req.raw, async (request, idem) => {
      const event = (await request.json()) as Stripe.Event;
      if (event.type === 'payment_intent.succeeded') {
        await idem!.phase('paid', (tx) => tx.query('UPDATE orders SET paid = true WHERE payment_intent = $1', [event.data.object.id]));
      }
      return Response.json({ received: true });
    }),
  );

  const fromGithub = webhookReceiver<Queryable>(github({ secret: secrets.github }), { store });
  app.post('/webhooks/github', (c) =>
    fromGithub(c.req.raw, async (request, idem) => {
      const event = request.headers.get('x-github-event');
      const body = await request.text();
      await idem!.phase('recorded', (tx) => tx.query('INSERT INTO github_events (event, body) VALUES ($1, $2)', [event, body]));
      return new Response(null, { status: 204 });
    }),
  );

  const fromShopify = webhookReceiver<Queryable>(shopify({ secret: secrets.shopify }), { store });
  app.post('/webhooks/shopify', (c) =>
    fromShopify(c.req.raw, async (request, idem) => {
      const order = (await request.json()) as { id: number; total_price: string };
      await idem!.phase('imported', (tx) => tx.query('INSERT INTO shop_orders (id, total) VALUES ($1, $2)', [order.id, order.total_price]));
      return new Response(null, { status: 200 });
    }),
  );

  const fromStandard = webhookReceiver<Queryable>(standardWebhooks({ verifier: new Webhook(secrets.standardWebhooks) }), { store });
  app.post('/webhooks/billing', (c) => fromStandard(c.req.raw, async () => Response.json({ received: true })));
  return app;
}
// #endregion app

export const WEBHOOK_SCHEMA = `
  CREATE TABLE IF NOT EXISTS orders (payment_intent text PRIMARY KEY, paid boolean NOT NULL DEFAULT false);
  CREATE TABLE IF NOT EXISTS github_events (id serial PRIMARY KEY, event text, body text NOT NULL);
  CREATE TABLE IF NOT EXISTS shop_orders (id bigint PRIMARY KEY, total text NOT NULL);
`;
