/**
 * The gateway's JWT principal: the scope is the `sub` of a bearer JWT verified with jose against
 * a JWKS served over HTTP here. Two subjects with one key are apart; one subject's refreshed token
 * is the same scope (the replay survives a token refresh); a token signed by another key, or
 * none, is 401 and claims nothing.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { gatewaySuite, post } from './helpers/gateway.js';
import { gatewayStores } from './helpers/gateway-stores.js';

const keys = await generateKeyPair('ES256');
const otherKeys = await generateKeyPair('ES256');
const jwk: JWK = { ...(await exportJWK(keys.publicKey)), kid: 'test', alg: 'ES256', use: 'sig' };

const jwks: Server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ keys: [jwk] }));
});
await new Promise<void>((resolve) => jwks.listen(0, '127.0.0.1', resolve));
const jwksUrl = `http://127.0.0.1:${(jwks.address() as { port: number }).port}/jwks.json`;
after(() => new Promise<void>((resolve) => jwks.close(() => resolve())));

async function token(sub: string, key = keys.privateKey, jti = randomUUID()): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'ES256', kid: 'test' })
    .setSubject(sub)
    .setIssuer('https://issuer.test/')
    .setAudience('payments')
    .setJti(jti)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(key);
}

describe('gateway: JWT principals', () => {
  const suite = gatewaySuite(gatewayStores[0]!, {
    principal: { jwt: { jwksUrl, issuer: 'https://issuer.test/', audience: 'payments' } },
    routes: [{ path: '/v1/*', methods: ['POST'] }],
  });
  let url: string;
  before(() => {
    url = `${suite.url}/v1/charges`;
  });

  it('scopes by sub: two subjects sending the same key are apart', async () => {
    const key = randomUUID();
    const alice = await post(url, { authorization: `Bearer ${await token('alice')}`, 'idempotency-key': key }, '{"a":1}');
    const bob = await post(url, { authorization: `Bearer ${await token('bob')}`, 'idempotency-key': key }, '{"a":2}');
    assert.equal(alice.status, 201);
    assert.equal(bob.status, 201);
    const effects = await suite.effectsOf(key);
    assert.deepEqual(effects.map((e) => e.scope).sort(), ['jwt:alice', 'jwt:bob']);
  });

  it('replays to the same subject under a refreshed token', async () => {
    const key = randomUUID();
    const first = await post(url, { authorization: `Bearer ${await token('carol')}`, 'idempotency-key': key }, '{}');
    const again = await post(url, { authorization: `Bearer ${await token('carol')}`, 'idempotency-key': key }, '{}');
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.deepEqual(again.bytes, first.bytes);
    assert.equal((await suite.effectsOf(key)).length, 1);
  });

  it('refuses a token signed by another key, or no token, with 401 and claims nothing', async () => {
    const key = randomUUID();
    const forged = await post(url, { authorization: `Bearer ${await token('alice', otherKeys.privateKey)}`, 'idempotency-key': key }, '{}');
    assert.equal(forged.status, 401);
    assert.equal(forged.json().type, 'urn:idem:problem:principal-missing');
    const none = await post(url, { 'idempotency-key': key }, '{}');
    assert.equal(none.status, 401);
    assert.equal((await suite.seenOf(key)).length, 0);
  });
});
