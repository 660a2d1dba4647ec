/**
 * The gateway's failure table (protocol.md K50, docs/guides/gateway.md): upstream 5xx, a reset
 * before the answer, a timeout, an upstream that is down, and a slow client, each with what
 * happens to the key, counted in the Python upstream's own database of effects.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../src/gateway/index.js';
import { gatewaySuite, post, retryUntilTakenOver, startGateway } from './helpers/gateway.js';
import { gatewayStores } from './helpers/gateway-stores.js';

/** The lease of these gateways: short, so a held key's takeover comes soon. */
const LEASE_MS = 1500;

for (const backend of gatewayStores) {
  describe(`gateway on ${backend.name}: the failure table`, () => {
    const suite = gatewaySuite(backend, {
      principal: 'none',
      routes: [{ path: '/v1/*', methods: ['POST'] }],
      leaseMs: LEASE_MS,
      upstreamTimeoutMs: 700,
      requestTimeoutMs: 1000,
    });
    const { effectsOf, seenOf } = suite;

    it('stores an upstream 500 and replays it (the library rule for a handler 5xx)', async () => {
      const key = randomUUID();
      const first = await post(`${suite.url}/v1/charges?mode=fail500`, { 'idempotency-key': key }, '{}');
      const again = await post(`${suite.url}/v1/charges?mode=fail500`, { 'idempotency-key': key }, '{}');
      assert.equal(first.status, 500);
      assert.equal(again.status, 500);
      assert.equal(again.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(again.bytes, first.bytes);
      assert.equal((await seenOf(key)).length, 1, 'the replay never reached the upstream');
    });

    it('passes an upstream 503 through with its Retry-After and keeps nothing: the retry is forwarded again', async () => {
      const key = randomUUID();
      const first = await post(`${suite.url}/v1/charges?mode=fail503`, { 'idempotency-key': key }, '{}');
      assert.equal(first.status, 503);
      assert.equal(first.headers.get('retry-after'), '2');
      const again = await post(`${suite.url}/v1/charges?mode=fail503`, { 'idempotency-key': key }, '{}');
      assert.equal(again.status, 503);
      assert.equal(again.headers.get('idempotent-replayed'), null);
      const seen = await seenOf(key);
      assert.equal(seen.length, 2);
      assert.ok(Number(seen[1]!.headers['idem-fencing-token']) > Number(seen[0]!.headers['idem-fencing-token']), 'a new claim draws a higher token');
    });

    it('reset before the answer: 502 saying it may have applied, the key held until its lease ends, then a higher token', async () => {
      const key = randomUUID();
      // The mode in a header the fingerprint ignores: the takeover is the same request, answered this time.
      const reset = await post(`${suite.url}/v1/charges`, { 'idempotency-key': key, 'x-mode': 'reset' }, '{}');
      assert.equal(reset.status, 502);
      assert.equal(reset.json().type, 'urn:idem:problem:upstream-outcome-unknown');
      assert.match(String(reset.json().detail), /may have applied/);
      const held = await post(`${suite.url}/v1/charges`, { 'idempotency-key': key }, '{}');
      assert.equal(held.status, 409, 'the key stays held: no second attempt beside one that may still run');
      assert.equal((await seenOf(key)).length, 1);
      // After the lease: the takeover reaches the upstream (and answers, this time) with a higher token.
      const taken = await retryUntilTakenOver(`${suite.url}/v1/charges`, { 'idempotency-key': key }, '{}');
      assert.equal(taken.status, 201);
      const seen = await seenOf(key);
      assert.equal(seen.length, 2);
      assert.ok(Number(seen[1]!.headers['idem-fencing-token']) > Number(seen[0]!.headers['idem-fencing-token']));
      assert.equal((await effectsOf(key)).length, 1);
    });

    it('upstream timeout: 504 saying it may have applied; the key stays held; the late write is fenced off', async () => {
      await suite.upstream.arm();
      const key = randomUUID();
      const timedOut = await post(`${suite.url}/v1/charges`, { 'idempotency-key': key, 'x-mode': 'hold' }, '{"n":1}');
      assert.equal(timedOut.status, 504);
      assert.equal(timedOut.json().type, 'urn:idem:problem:upstream-timeout');
      assert.match(String(timedOut.json().detail), /may have applied/);
      assert.equal((await post(`${suite.url}/v1/charges`, { 'idempotency-key': key }, '{"n":1}')).status, 409);
      // The first attempt is still held in the upstream: the takeover reaches it with a higher token.
      const taken = await retryUntilTakenOver(`${suite.url}/v1/charges`, { 'idempotency-key': key }, '{"n":1}');
      assert.equal(taken.status, 201);
      const seen = await seenOf(key);
      assert.equal(seen.length, 2);
      const [t1, t2] = seen.map((s) => Number(s.headers['idem-fencing-token']));
      assert.ok(t2! > t1!);
      assert.equal(seen[1]!.headers['idem-attempt'], '2', 'the abandoned attempt counts as a crash');
      // The held first attempt wakes after the takeover: the upstream's fence refuses its write.
      await suite.upstream.release();
      await suite.upstream.settled();
      const effects = await effectsOf(key);
      assert.equal(effects.length, 1);
      assert.equal(effects[0]!.token, t2);
    });

    // Without the request timeout the socket would stay open: the test's own timeout fails it.
    it('answers a slow client with a cut connection at requestTimeoutMs, claiming nothing', { timeout: 120_000 }, async () => {
      const address = new URL(suite.url);
      const socket = connect(Number(address.port), address.hostname);
      socket.write(`POST /v1/charges HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{`);
      let answer = '';
      socket.on('data', (d: Buffer) => (answer += d.toString()));
      await new Promise<void>((resolve) => socket.once('close', () => resolve()));
      assert.ok(answer === '' || answer.startsWith('HTTP/1.1 408'), `a 408, or the connection closed (got ${JSON.stringify(answer.slice(0, 40))})`);
      assert.equal((await seenOf('slow')).length, 0);
    });
  });

  describe(`gateway on ${backend.name}: an upstream that is down`, () => {
    let gateway: Gateway;
    let url: string;
    let close: () => Promise<void>;
    let port: number;

    before(async () => {
      // A port that was just free: nothing listens there, so connections are refused.
      const probe: Server = createServer();
      await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
      port = (probe.address() as { port: number }).port;
      await new Promise<void>((resolve) => probe.close(() => resolve()));
      const opened = await backend.open();
      close = opened.close;
      ({ gateway, url } = await startGateway(opened.store, {
        upstream: `http://127.0.0.1:${port}`,
        principal: 'none',
        routes: [{ path: '/v1/*', methods: ['POST'] }],
        leaseMs: 60_000,
      }));
    });
    after(async () => {
      await gateway.close();
      await close();
    });

    it('connection refused: 502 saying it was not applied, and the key released at once (the retry is forwarded again)', async () => {
      const key = randomUUID();
      const refused = await post(`${url}/v1/charges`, { 'idempotency-key': key }, '{}');
      assert.equal(refused.status, 502);
      assert.equal(refused.json().type, 'urn:idem:problem:upstream-unreachable');
      assert.match(String(refused.json().detail), /not applied/);
      // With a 60 s lease, a held key would answer 409: released, the retry is tried again.
      const again = await post(`${url}/v1/charges`, { 'idempotency-key': key }, '{}');
      assert.equal(again.status, 502);
      assert.equal(again.json().type, 'urn:idem:problem:upstream-unreachable');
    });

    it('readyz stays ready: it is the store health, not the upstream', async () => {
      assert.equal((await fetch(`${url}/readyz`)).status, 200);
    });
  });
}
