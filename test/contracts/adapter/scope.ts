/**
 * Adapter contract, part: Scopes: keys are per credential (Authorization, else Cookie, else public), hashed, never stored raw; a custom scope resolver.
 * Registered by `adapterContract` (test/contracts/adapter.ts) for every harness and store.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { jsonReply, created, type SuiteContext } from './shared.js';

/** Registers this part of the adapter contract. */
export function scopeSuite(c: SuiteContext): void {
  const { setup } = c;
  describe('scope', () => {
    it('two Authorization credentials with the same key and body each run once and get their own response', async () => {
      const { send, counter, count } = await setup((req) => jsonReply(201, { owner: req.headers.get('authorization') }));
      const as = (token: string) => ({ key: 'shared', json: { amount: 1 }, headers: { authorization: `Bearer ${token}` } });
      const a = await send('/v1/charges', as('sk_tenant_a'));
      const b = await send('/v1/charges', as('sk_tenant_b'));
      assert.equal(a.status, 201);
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null);
      assert.deepEqual(await a.json(), { owner: 'Bearer sk_tenant_a' });
      assert.deepEqual(await b.json(), { owner: 'Bearer sk_tenant_b' });
      const ra = await send('/v1/charges', as('sk_tenant_a'));
      const rb = await send('/v1/charges', as('sk_tenant_b'));
      assert.equal(ra.headers.get('idempotent-replayed'), 'true');
      assert.equal(rb.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await ra.json(), { owner: 'Bearer sk_tenant_a' });
      assert.deepEqual(await rb.json(), { owner: 'Bearer sk_tenant_b' });
      assert.equal(counter.H, 2);
      assert.equal(await count(), 2);
    });

    it('the raw Authorization value is never stored: the scope column holds its SHA-256', async () => {
      const { send, rows, dump } = await setup(created);
      const secret = 'Bearer sk_live_very_secret_value_123';
      await (await send('/v1/charges', { key: 'scoped', json: {}, headers: { authorization: secret } })).arrayBuffer();
      await (await send('/v1/charges', { key: 'scoped', json: {} })).arrayBuffer();
      const hashed = 'auth:' + createHash('sha256').update(secret).digest('base64url');
      assert.deepEqual((await rows()).map((r) => r.scope).sort(), [hashed, 'public'].sort());
      assert.ok(!(await dump()).includes('sk_live_very_secret_value_123'), 'the credential appears nowhere in the table');
    });

    it('without Authorization, two different Cookie headers with the same key and body each run once (H=2); the same Cookie replays', async () => {
      const counted = { n: 0 };
      const { send, counter, rows } = await setup((req) => jsonReply(201, { session: req.headers.get('cookie'), n: ++counted.n }));
      const alice = { cookie: 'sid=alice-session-1; theme=dark' };
      const bob = { cookie: 'sid=bob-session-2; theme=dark' };
      const a = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: alice });
      const b = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: bob });
      assert.equal(a.status, 201);
      assert.equal(b.status, 201);
      assert.equal(b.headers.get('idempotent-replayed'), null, "bob does not get alice's response");
      assert.deepEqual(await a.json(), { session: alice.cookie, n: 1 });
      assert.deepEqual(await b.json(), { session: bob.cookie, n: 2 });
      assert.equal(counter.H, 2);
      const ra = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' }, headers: alice });
      assert.equal(ra.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await ra.json(), { session: alice.cookie, n: 1 });
      const anonymous = await send('/v1/orders', { key: 'cart-1', json: { sku: 'x' } });
      assert.equal(anonymous.headers.get('idempotent-replayed'), null, 'no credential at all: the shared public scope, not a cookie scope');
      await anonymous.arrayBuffer();
      assert.equal(counter.H, 3);
      const cookieScope = (cookie: string) => 'cookie:' + createHash('sha256').update(cookie).digest('base64url');
      assert.deepEqual((await rows()).map((r) => r.scope).sort(), [cookieScope(alice.cookie), cookieScope(bob.cookie), 'public'].sort());
    });

    it('the raw Cookie value is never stored; Authorization, when present, decides the scope instead of Cookie', async () => {
      const { send, counter, rows, dump } = await setup(() => jsonReply(201, { ok: true }));
      const cookie = 'session=cookie_very_secret_value_456';
      await (await send('/v1/orders', { key: 'c1', json: {}, headers: { cookie } })).arrayBuffer();
      // With Authorization the cookie does not matter: a rotated cookie still replays.
      const authorization = 'Bearer sk_with_cookie';
      await (await send('/v1/orders', { key: 'c2', json: {}, headers: { cookie, authorization } })).arrayBuffer();
      const rotated = await send('/v1/orders', { key: 'c2', json: {}, headers: { cookie: 'session=rotated', authorization } });
      assert.equal(rotated.headers.get('idempotent-replayed'), 'true');
      await rotated.arrayBuffer();
      assert.equal(counter.H, 2);
      assert.deepEqual(
        (await rows()).map((r) => r.scope).sort(),
        ['auth:' + createHash('sha256').update(authorization).digest('base64url'), 'cookie:' + createHash('sha256').update(cookie).digest('base64url')].sort(),
      );
      assert.ok(!(await dump()).includes('cookie_very_secret_value_456'), 'the cookie appears nowhere in the table');
    });

    it('a custom scope resolver decides the scope (Authorization is then ignored)', async () => {
      const { send, counter, rows } = await setup(created, { scope: (req) => `tenant:${req.headers.get('x-tenant') ?? 'none'}` });
      await (await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer old-token' } })).arrayBuffer();
      const rotated = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't1', authorization: 'Bearer refreshed-token' } });
      assert.equal(rotated.headers.get('idempotent-replayed'), 'true', 'same tenant, rotated credential: one scope');
      const other = await send('/v1/charges', { key: 'k', json: {}, headers: { 'x-tenant': 't2', authorization: 'Bearer old-token' } });
      assert.equal(other.headers.get('idempotent-replayed'), null, 'another tenant, same credential: its own scope');
      await Promise.all([rotated.arrayBuffer(), other.arrayBuffer()]);
      assert.equal(counter.H, 2);
      assert.deepEqual(
        (await rows()).map((r) => r.scope),
        ['tenant:t1', 'tenant:t2'],
      );
    });
  });
}
