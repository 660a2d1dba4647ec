/**
 * idem gateway in front of a Python upstream (test/gateway/upstream.py, sqlite3): the library's
 * answers through a proxy, counted in the upstream's own database of effects. Runs on the memory
 * store, and on PostgreSQL when DATABASE_URL is set.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { describe, it } from 'node:test';
import { gatewaySuite, post } from './helpers/gateway.js';
import { gatewayStores } from './helpers/gateway-stores.js';

for (const backend of gatewayStores) {
  describe(`gateway on ${backend.name}: the library's answers`, () => {
    const suite = gatewaySuite(backend, {
      principal: { hash: 'authorization' },
      routes: [
        { path: '/v1/*', methods: ['POST'] },
        { path: '/tenants/*', methods: ['POST'], principal: { header: 'x-tenant' } },
      ],
      maxBodyBytes: 1024,
    });
    const { effectsOf } = suite;

    it('32 concurrent duplicates: one upstream effect, 32 identical answers', async () => {
      const key = randomUUID();
      const headers = { authorization: 'Bearer alice', 'idempotency-key': key };
      const answers = await Promise.all(
        Array.from({ length: 32 }, async () => {
          // A duplicate that meets the first one in flight gets 409 + Retry-After: retry as a client does.
          for (;;) {
            const answer = await post(`${suite.url}/v1/charges`, headers, '{"amount":100}');
            if (answer.status !== 409) return answer;
            assert.ok(answer.headers.get('retry-after'));
            await new Promise((resolve) => setTimeout(resolve, 50));
          }
        }),
      );
      assert.equal((await effectsOf(key)).length, 1);
      const first = answers[0]!;
      assert.equal(first.status, 201);
      for (const answer of answers) {
        assert.equal(answer.status, 201);
        assert.deepEqual(answer.bytes, first.bytes);
      }
    });

    it('replays the first response byte for byte with the replay marker, and never calls the upstream again', async () => {
      const key = randomUUID();
      const headers = { authorization: 'Bearer alice', 'idempotency-key': key };
      const first = await post(`${suite.url}/v1/charges`, headers, '{"amount":7}');
      const second = await post(`${suite.url}/v1/charges`, headers, '{"amount":7}');
      assert.equal(first.status, 201);
      assert.equal(first.headers.get('idempotent-replayed'), null);
      assert.equal(second.status, 201);
      assert.equal(second.headers.get('idempotent-replayed'), 'true');
      assert.equal(second.headers.get('content-type'), 'application/json');
      assert.deepEqual(second.bytes, first.bytes);
      assert.equal((await effectsOf(key)).length, 1);
    });

    it('answers 422 to the same key with another body, without forwarding it', async () => {
      const key = randomUUID();
      const headers = { authorization: 'Bearer alice', 'idempotency-key': key };
      assert.equal((await post(`${suite.url}/v1/charges`, headers, '{"amount":1}')).status, 201);
      const reused = await post(`${suite.url}/v1/charges`, headers, '{"amount":2}');
      assert.equal(reused.status, 422);
      assert.equal(reused.headers.get('content-type'), 'application/problem+json');
      assert.equal(reused.json().type, 'urn:idem:problem:idempotency-key-reused');
      assert.equal((await effectsOf(key)).length, 1);
    });

    it('forwards the key, its scope, the fencing token and the attempt; drops hop-by-hop fields and a forged replay marker', async () => {
      const key = randomUUID();
      // node:http, not fetch: fetch will not send a Connection header of the caller's.
      const answer = await new Promise<{ status: number; json: () => Record<string, unknown> }>((resolve, reject) => {
        const headers = {
          authorization: 'Bearer alice',
          'content-type': 'application/json',
          'idempotency-key': key,
          'idempotency-replayed': 'true',
          'idempotent-replayed': 'true',
          'idem-fencing-token': '999999',
          connection: 'keep-alive, x-hop',
          'x-hop': 'secret',
          'x-end-to-end': 'kept',
        };
        const req = httpRequest(`${suite.url}/v1/charges`, { method: 'POST', headers }, (res) => {
          let text = '';
          res.on('data', (d: Buffer) => (text += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode!, json: () => JSON.parse(text) as Record<string, unknown> }));
        });
        req.on('error', reject);
        req.end('{"amount":3}');
      });
      assert.equal(answer.status, 201);
      const seen = (await suite.upstream.state()).seen.filter((s) => s.headers['idempotency-key'] === key);
      assert.equal(seen.length, 1);
      const got = seen[0]!.headers;
      assert.equal(got['idempotency-replayed'], undefined);
      assert.equal(got['idempotent-replayed'], undefined);
      assert.equal(got['x-hop'], undefined, 'a field the Connection header lists is hop-by-hop');
      assert.equal(got['x-end-to-end'], 'kept');
      assert.equal(got.authorization, 'Bearer alice');
      assert.match(got['idem-scope']!, /^hash:/);
      assert.notEqual(got['idem-fencing-token'], '999999', "the client's token is never passed on");
      assert.equal(got['idem-fencing-token'], String(answer.json().token));
      assert.ok(Number(got['idem-fencing-token']) >= 1);
      assert.equal(got['idem-attempt'], '1');
    });

    it('keeps two principals sending the same key apart', async () => {
      const key = randomUUID();
      const alice = await post(`${suite.url}/v1/charges`, { authorization: 'Bearer alice', 'idempotency-key': key }, '{"amount":5}');
      const bob = await post(`${suite.url}/v1/charges`, { authorization: 'Bearer bob', 'idempotency-key': key }, '{"amount":6}');
      assert.equal(alice.status, 201);
      assert.equal(bob.status, 201, 'no 422: another principal, another scope');
      assert.notEqual(alice.json().id, bob.json().id);
      const t1 = await post(`${suite.url}/tenants/t`, { 'x-tenant': 'acme', 'idempotency-key': key }, '{}');
      const t2 = await post(`${suite.url}/tenants/t`, { 'x-tenant': 'globex', 'idempotency-key': key }, '{}');
      assert.notEqual(t1.json().id, t2.json().id);
      const effects = await effectsOf(key);
      assert.equal(effects.length, 4);
      assert.equal(new Set(effects.map((e) => e.scope)).size, 4);
    });

    it('refuses a claimed route without its principal (401), forwarding nothing', async () => {
      const key = randomUUID();
      const answer = await post(`${suite.url}/tenants/t`, { 'idempotency-key': key }, '{}');
      assert.equal(answer.status, 401);
      assert.equal(answer.json().type, 'urn:idem:problem:principal-missing');
      assert.equal((await effectsOf(key)).length, 0);
    });

    it('requires a key on a claimed route (400), forwarding nothing', async () => {
      const answer = await post(`${suite.url}/v1/charges`, { authorization: 'Bearer alice' }, '{}');
      assert.equal(answer.status, 400);
      assert.equal(answer.json().type, 'urn:idem:problem:idempotency-key-missing');
    });

    it('never stores or replays Set-Cookie: the first client gets it, a replay does not', async () => {
      const key = randomUUID();
      const headers = { authorization: 'Bearer alice', 'idempotency-key': key };
      const first = await post(`${suite.url}/v1/charges?mode=cookie`, headers, '{}');
      const replay = await post(`${suite.url}/v1/charges?mode=cookie`, headers, '{}');
      assert.equal(first.headers.get('set-cookie'), 'session=secret; HttpOnly');
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      assert.equal(replay.headers.get('set-cookie'), null);
    });

    it('answers 413 to a body over the limit before anything is claimed or forwarded', async () => {
      const key = randomUUID();
      const answer = await post(
        `${suite.url}/v1/charges`,
        { authorization: 'Bearer alice', 'idempotency-key': key },
        JSON.stringify({ pad: 'x'.repeat(4096) }),
      );
      assert.equal(answer.status, 413);
      assert.equal(answer.json().type, 'urn:idem:problem:request-too-large');
      assert.equal((await effectsOf(key)).length, 0);
      // Nothing was claimed: the same key with a small body runs.
      assert.equal((await post(`${suite.url}/v1/charges`, { authorization: 'Bearer alice', 'idempotency-key': key }, '{}')).status, 201);
    });

    it('413s a chunked body that grows past the limit', async () => {
      const key = randomUUID();
      const status = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${suite.url}/v1/charges`, { method: 'POST', headers: { authorization: 'Bearer a', 'idempotency-key': key } }, (res) => {
          res.resume();
          resolve(res.statusCode!);
        });
        req.on('error', reject);
        for (let i = 0; i < 8; i++) req.write('x'.repeat(512));
        req.end();
      });
      assert.equal(status, 413);
      assert.equal((await effectsOf(key)).length, 0);
    });

    it('passes requests on unclaimed paths and methods through, unclaimed', async () => {
      const res = await fetch(`${suite.url}/other/thing`);
      assert.equal(res.status, 200);
      assert.deepEqual(await res.json(), { get: '/other/thing' });
      assert.equal((await fetch(`${suite.url}/healthz`)).status, 200);
      const ready = await fetch(`${suite.url}/readyz`);
      assert.equal(ready.status, 200);
      assert.deepEqual(await ready.json(), { status: 'ready' });
    });
  });
}
