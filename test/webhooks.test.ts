/**
 * idem/webhooks through a real Hono server (@hono/node-server, real sockets) over the work
 * stores (test/helpers/work-stores.ts): each provider's delivery, in the shape of its docs'
 * example, signed as the provider signs it (Stripe's and Standard Webhooks' own libraries sign
 * theirs), is received once: a redelivery replays the 2xx and the handler runs once; a tampered
 * body is refused before anything is claimed; a redelivery while the first still runs gets 409
 * with Retry-After, then the replay.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import Stripe from 'stripe';
import { Webhook } from 'standardwebhooks';
import { adyen, github, shopify, slack, standardWebhooks, stripe, webhookReceiver, type WebhookPreset } from '../src/webhooks/index.js';
import type { StoreHarness } from './helpers/stores.js';
import { workStores, useWorkStore } from './helpers/work-stores.js';
import { deferred } from './helpers/http.js';
import { pglite } from './helpers/pglite.js';
import { PostgresStore } from '../src/postgres/index.js';
import { MemoryStore } from '../src/memory/index.js';
import { WEBHOOK_SCHEMA, webhookApp } from '../examples/webhooks/server.js';

const SECRET = 'It’s a Secret to Everybody';
const ADYEN_KEY = '44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056';
const SW_SECRET = `whsec_${Buffer.from('standard-webhooks-test-secret-32b').toString('base64')}`;
const stripeSdk = new Stripe('sk_test_123');
const hex = (key: string | Buffer, data: string | Buffer) => createHmac('sha256', key).update(data).digest('hex');
const b64 = (key: string | Buffer, data: string | Buffer) => createHmac('sha256', key).update(data).digest('base64');

/** A provider: its preset, one delivery as its docs show it, signed, and what its handler answers. */
interface Provider {
  name: string;
  preset: WebhookPreset;
  delivery(): { body: string; headers: Record<string, string> };
  refused: number;
  answer: () => Response;
  /** A tampered body: a field added, or (Adyen, whose HMAC covers named fields only) a signed field changed. */
  tamper?: (body: string) => string;
}

const json = (value: unknown) => JSON.stringify(value);
const ok = () => Response.json({ received: true });

const providers: Provider[] = [
  {
    name: 'stripe',
    preset: stripe({ webhooks: stripeSdk.webhooks, secret: SECRET }),
    refused: 400,
    answer: ok,
    delivery() {
      const body = json({
        id: 'evt_1NG8Du2eZvKYlo2CUI79vXWy',
        object: 'event',
        api_version: '2022-11-15',
        created: 1686089970,
        data: { object: { id: 'pi_3NG8Dt2eZvKYlo2C0z1vQUXd', object: 'payment_intent', amount: 2000, currency: 'usd', status: 'succeeded' } },
        livemode: false,
        pending_webhooks: 1,
        request: { id: null, idempotency_key: null },
        type: 'payment_intent.succeeded',
      });
      return {
        body,
        headers: { 'content-type': 'application/json', 'stripe-signature': stripeSdk.webhooks.generateTestHeaderString({ payload: body, secret: SECRET }) },
      };
    },
  },
  {
    name: 'github',
    preset: github({ secret: SECRET }),
    refused: 401,
    answer: () => new Response(null, { status: 204 }),
    delivery() {
      const body = json({
        action: 'opened',
        issue: { url: 'https://api.github.com/repos/octocat/Hello-World/issues/1347', number: 1347 },
        repository: { id: 1296269, full_name: 'octocat/Hello-World' },
        sender: { login: 'octocat', id: 1 },
      });
      return {
        body,
        headers: {
          'content-type': 'application/json',
          'user-agent': 'GitHub-Hookshot/044aadd',
          'x-github-event': 'issues',
          'x-github-delivery': '72d3162e-cc78-11e3-81ab-4c9367dc0958',
          'x-github-hook-id': '292430182',
          'x-hub-signature-256': `sha256=${hex(SECRET, body)}`,
        },
      };
    },
  },
  {
    name: 'shopify',
    preset: shopify({ secret: SECRET }),
    refused: 401,
    answer: ok,
    delivery() {
      const body = json({
        id: 820982911946154500,
        email: 'jon@example.com',
        total_price: '403.00',
        currency: 'USD',
        line_items: [{ id: 866550311766439000, quantity: 1, sku: 'IPOD2008PINK' }],
      });
      return {
        body,
        headers: {
          'content-type': 'application/json',
          'x-shopify-topic': 'orders/create',
          'x-shopify-hmac-sha256': b64(SECRET, body),
          'x-shopify-shop-domain': 'example.myshopify.com',
          'x-shopify-api-version': '2025-01',
          'x-shopify-webhook-id': 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
          'x-shopify-event-id': '98880550-7158-44d4-b7cd-2c97c8a091b5',
        },
      };
    },
  },
  {
    name: 'slack',
    preset: slack({ signingSecret: SECRET }),
    refused: 401,
    answer: () => new Response(null, { status: 200 }),
    delivery() {
      const body = json({
        token: 'XXYYZZ',
        team_id: 'T123ABC456',
        api_app_id: 'A123ABC456',
        event: {
          type: 'app_mention',
          user: 'U123ABC456',
          text: '<@U0LAN0Z89> is it everything a river should be?',
          ts: '1515449522.000016',
          channel: 'C123ABC456',
        },
        type: 'event_callback',
        event_id: 'Ev123ABC456',
        event_time: 1515449522,
      });
      const ts = String(Math.floor(Date.now() / 1000));
      return {
        body,
        headers: { 'content-type': 'application/json', 'x-slack-request-timestamp': ts, 'x-slack-signature': `v0=${hex(SECRET, `v0:${ts}:${body}`)}` },
      };
    },
  },
  {
    name: 'adyen',
    preset: adyen({ hmacKey: ADYEN_KEY }),
    refused: 401,
    tamper: (body) => body.replace('"value":1000', '"value":9000'),
    answer: () => new Response('[accepted]', { headers: { 'content-type': 'text/plain' } }),
    delivery() {
      const item = {
        amount: { currency: 'EUR', value: 1000 },
        eventCode: 'AUTHORISATION',
        eventDate: '2022-12-01T01:00:00+01:00',
        merchantAccountCode: 'YOUR_MERCHANT_ACCOUNT',
        merchantReference: 'YOUR_MERCHANT_REFERENCE',
        paymentMethod: 'ideal',
        pspReference: 'YOUR_PSP_REFERENCE',
        reason: '',
        success: 'true',
      };
      const data = [
        item.pspReference,
        '',
        item.merchantAccountCode,
        item.merchantReference,
        item.amount.value,
        item.amount.currency,
        item.eventCode,
        item.success,
      ].join(':');
      const signed = { ...item, additionalData: { hmacSignature: b64(Buffer.from(ADYEN_KEY, 'hex'), data) } };
      return { body: json({ live: 'false', notificationItems: [{ NotificationRequestItem: signed }] }), headers: { 'content-type': 'application/json' } };
    },
  },
  {
    name: 'standard-webhooks',
    preset: standardWebhooks({ verifier: new Webhook(SW_SECRET) }),
    refused: 401,
    answer: ok,
    delivery() {
      const body = json({ type: 'invoice.paid', timestamp: '2022-11-03T20:26:10.344522Z', data: { id: 'inv_123', amount: 1000 } });
      const id = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
      const at = new Date();
      return {
        body,
        headers: {
          'content-type': 'application/json',
          'webhook-id': id,
          'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
          'webhook-signature': new Webhook(SW_SECRET).sign(id, at, body),
        },
      };
    },
  },
];

/** A Hono app on a real socket with one route per provider; the handler commits one effect per delivery. */
async function server(h: StoreHarness, gate?: { entered: () => void; wait: Promise<void> }) {
  const runs: string[] = [];
  const app = new Hono();
  for (const p of providers) {
    const receive = webhookReceiver(p.preset, { store: h.store });
    app.post(`/webhooks/${p.name}`, (c) =>
      receive(c.req.raw, async (request, idem) => {
        const text = await request.text();
        runs.push(p.name);
        gate?.entered();
        await gate?.wait;
        await idem!.phase('recorded', h.effect(`${p.name} ${text.length}`));
        return p.answer();
      }),
    );
  }
  let node!: http.Server;
  const info = await new Promise<AddressInfo>((resolve) => {
    node = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, resolve) as http.Server;
  });
  node.keepAliveTimeout = 0;
  return {
    runs,
    url: `http://127.0.0.1:${info.port}`,
    close: () => new Promise<void>((resolve) => (node.closeAllConnections(), node.close(() => resolve()))),
  };
}

const send = (url: string, d: { body: string; headers: Record<string, string> }) => fetch(url, { method: 'POST', headers: d.headers, body: d.body });

for (const factory of workStores) {
  describe(`webhooks through Hono over ${factory.name}`, () => {
    const fresh = useWorkStore(factory);

    for (const p of providers) {
      it(`${p.name}: a tampered body is refused (${p.refused}) and claims nothing; the delivery runs once and its redelivery replays the 2xx`, async () => {
        const h = await fresh();
        const s = await server(h);
        try {
          const d = p.delivery();
          const tampered = await send(`${s.url}/webhooks/${p.name}`, { ...d, body: p.tamper ? p.tamper(d.body) : `${d.body.slice(0, -1)},"amount":1}` });
          assert.equal(tampered.status, p.refused);
          assert.equal(tampered.headers.get('content-type'), 'application/problem+json');
          assert.equal(((await tampered.json()) as { type: string }).type, 'urn:idem:problem:webhook-signature-invalid');
          assert.equal((await h.rows()).length, 0);
          const first = await send(`${s.url}/webhooks/${p.name}`, d);
          const firstBody = await first.text();
          assert.ok(first.status >= 200 && first.status < 300, `${first.status} ${firstBody}`);
          const again = await send(`${s.url}/webhooks/${p.name}`, p.delivery()); // re-signed, as a provider's retry is
          assert.equal(again.status, first.status);
          assert.equal(await again.text(), firstBody);
          assert.equal(again.headers.get('idempotent-replayed'), 'true');
          assert.deepEqual(s.runs, [p.name]);
          assert.equal((await h.effects()).length, 1);
        } finally {
          await s.close();
        }
      });
    }

    it('a redelivery while the first still runs gets 409 with Retry-After, then the replay; the handler runs once (every provider)', async () => {
      const h = await fresh();
      const release = deferred<void>();
      let entered = deferred<void>();
      const s = await server(h, { entered: () => entered.resolve(), wait: release.promise });
      try {
        const firsts = [];
        for (const p of providers) {
          entered = deferred<void>();
          firsts.push(send(`${s.url}/webhooks/${p.name}`, p.delivery()));
          await entered.promise;
          const retry = await send(`${s.url}/webhooks/${p.name}`, p.delivery());
          assert.equal(retry.status, 409, p.name);
          assert.ok(Number(retry.headers.get('retry-after')) >= 1, p.name);
        }
        release.resolve();
        for (const first of await Promise.all(firsts)) assert.ok(first.status < 300);
        for (const p of providers) assert.equal((await send(`${s.url}/webhooks/${p.name}`, p.delivery())).headers.get('idempotent-replayed'), 'true');
        assert.deepEqual(
          s.runs,
          providers.map((p) => p.name),
        );
      } finally {
        release.resolve();
        await s.close();
      }
    });

    it('slack: a url_verification challenge is answered unprotected; an unsigned one is refused', async () => {
      const h = await fresh();
      const receive = webhookReceiver(slack({ signingSecret: SECRET }), { store: h.store });
      const body = json({ token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl', challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P', type: 'url_verification' });
      const ts = String(Math.floor(Date.now() / 1000));
      const signed = new Request('http://x/slack', {
        method: 'POST',
        body,
        headers: { 'x-slack-request-timestamp': ts, 'x-slack-signature': `v0=${hex(SECRET, `v0:${ts}:${body}`)}` },
      });
      const answer = await receive(signed, async (req, idem) =>
        Response.json({ challenge: ((await req.json()) as { challenge: string }).challenge, protected: idem !== undefined }),
      );
      assert.deepEqual(await answer.json(), { challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P', protected: false });
      const stale = String(Math.floor(Date.now() / 1000) - 600);
      const old = new Request('http://x/slack', {
        method: 'POST',
        body,
        headers: { 'x-slack-request-timestamp': stale, 'x-slack-signature': `v0=${hex(SECRET, `v0:${stale}:${body}`)}` },
      });
      assert.equal((await receive(old, () => new Response('ran'))).status, 401);
      assert.equal((await h.rows()).length, 0);
    });
  });
}

describe('examples/webhooks/server.ts on PGlite', () => {
  it('each provider’s delivery and its redelivery write one row; a tampered one none', async () => {
    const db = pglite();
    try {
      await db.exec(WEBHOOK_SCHEMA);
      await db.query("INSERT INTO orders (payment_intent) VALUES ('pi_3NG8Dt2eZvKYlo2C0z1vQUXd')");
      const store = new PostgresStore({ client: db });
      await store.migrate();
      const app = webhookApp(store, { stripeKey: 'sk_test_123', stripeWebhookSecret: SECRET, github: SECRET, shopify: SECRET, standardWebhooks: SW_SECRET });
      const post = (path: string, d: { body: string; headers: Record<string, string> }) =>
        app.request(path, { method: 'POST', headers: d.headers, body: d.body });
      const routes: Record<string, string> = {
        stripe: '/webhooks/stripe',
        github: '/webhooks/github',
        shopify: '/webhooks/shopify',
        'standard-webhooks': '/webhooks/billing',
      };
      for (const [name, path] of Object.entries(routes)) {
        const p = providers.find((x) => x.name === name)!;
        const d = p.delivery();
        assert.equal((await post(path, { ...d, body: `${d.body.slice(0, -1)},"amount":1}` })).status, p.refused, name);
        assert.ok((await post(path, d)).status < 300, name);
        assert.equal((await post(path, p.delivery())).headers.get('idempotent-replayed'), 'true', name);
      }
      const count = async (table: string) => (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)).rows[0]!.n;
      assert.equal(await count('github_events'), 1);
      assert.equal(await count('shop_orders'), 1);
      assert.equal((await db.query<{ paid: boolean }>('SELECT paid FROM orders')).rows[0]!.paid, true);
    } finally {
      await db.close();
    }
  });
});

describe('webhooks: the body limit of the HTTP core (protocol.md H27)', () => {
  it('a delivery over maxBodyBytes is answered 413 problem+json, with or without Content-Length, unread past the limit; nothing runs or is claimed', async () => {
    const store = new MemoryStore();
    const runs: number[] = [];
    const receive = webhookReceiver(github({ secret: SECRET }), { store, maxBodyBytes: 4096 });
    const app = new Hono();
    app.post('/webhooks/github', (c) =>
      receive(c.req.raw, async (request) => {
        runs.push((await request.arrayBuffer()).byteLength);
        return new Response(null, { status: 204 });
      }),
    );
    let node!: http.Server;
    const info = await new Promise<AddressInfo>((resolve) => {
      node = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, resolve) as http.Server;
    });
    const url = `http://127.0.0.1:${info.port}/webhooks/github`;
    const signed = (body: string, id: string) => ({
      'content-type': 'application/json',
      'x-github-event': 'issues',
      'x-github-delivery': id,
      'x-hub-signature-256': `sha256=${hex(SECRET, body)}`,
    });
    try {
      const big = json({ action: 'opened', padding: 'x'.repeat(8192) }); // signed as GitHub would: only the size is wrong
      const declared = await fetch(url, { method: 'POST', headers: signed(big, 'big-1'), body: big });
      assert.equal(declared.status, 413);
      assert.equal(declared.headers.get('content-type'), 'application/problem+json');
      const problem = (await declared.json()) as { type: string; status: number };
      assert.equal(problem.type, 'urn:idem:problem:request-too-large');
      assert.equal(problem.status, 413);
      // Chunked, no Content-Length: counted as it streams, and refused once past the limit.
      const bytes = new TextEncoder().encode(big);
      const streamed = await fetch(url, {
        method: 'POST',
        headers: signed(big, 'big-2'),
        body: new ReadableStream<Uint8Array>({
          start(controller) {
            for (let at = 0; at < bytes.length; at += 1024) controller.enqueue(bytes.slice(at, at + 1024));
            controller.close();
          },
        }),
        duplex: 'half',
      } as RequestInit);
      assert.equal(streamed.status, 413);
      assert.equal(((await streamed.json()) as { type: string }).type, 'urn:idem:problem:request-too-large');
      assert.deepEqual(runs, []);
      assert.equal(await store.get('webhook:github', 'big-1', 86_400_000), undefined);
      assert.equal(await store.get('webhook:github', 'big-2', 86_400_000), undefined);
      // Within the limit the same endpoint runs the delivery.
      const small = json({ action: 'opened' });
      assert.equal((await fetch(url, { method: 'POST', headers: signed(small, 'small-1'), body: small })).status, 204);
      assert.deepEqual(runs, [small.length]);
    } finally {
      node.closeAllConnections();
      await new Promise<void>((resolve) => node.close(() => resolve()));
    }
  });
});
