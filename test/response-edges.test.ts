/**
 * Edges of the response path, on every adapter and every engine (issue 11): a body stream that
 * errors mid-way, a response too large to keep (`maxResponseBytes`), a returned 503 before any
 * phase committed (`releaseStatuses`), `getKey` next to a different key header, and the
 * fingerprint projection (`fingerprintIgnore`, `fingerprintProjection`) with a JSON-RPC client.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable, SqlClient } from '../src/postgres/client.js';
import { harnesses, type AdapterHarness, type Reply, type Route } from './helpers/adapter-harness.js';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import { assertProblem, bytes, countRows, keyRows, requestInit, type Send } from './helpers/http.js';

const GATED = { timeout: 30_000 };

/** A body stream that sends one chunk, then fails. */
function brokenStream(): ReadableStream<Uint8Array> {
  let sent = false;
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      if (!sent) {
        sent = true;
        controller.enqueue(new TextEncoder().encode('{"partial":'));
      } else {
        controller.error(new Error('upstream stream broke'));
      }
    },
  });
}

function edges(harness: AdapterHarness, db: () => SqlClient, cleanup: (fn: () => Promise<void>) => void): void {
  async function setup(route: Route, options: Partial<IdempotencyOptions<Queryable>> = {}) {
    const { store, table, drop } = await freshStore(db());
    cleanup(drop);
    const counter = { H: 0 };
    const app = harness.build(
      { store, onHandlerError: () => undefined, ...options },
      (req, ctx) => {
        counter.H++;
        return route(req, ctx);
      },
      cleanup,
    );
    const send = (path: string, s: Send = {}) => app.send(path, requestInit(s));
    return { counter, send, rows: () => keyRows(db(), table), count: () => countRows(db(), table) };
  }

  it(
    'a body stream erroring after the first chunk: idem 500 problem, lease released with the recovery point kept, the retry resumes at once',
    GATED,
    async () => {
      let charged = 0;
      let broken = true;
      const { send, counter, rows } = await setup(
        async (_req, ctx) => {
          await ctx!.phase('charged', async () => ++charged);
          if (broken) {
            broken = false;
            return new Response(brokenStream(), { status: 201, headers: { 'content-type': 'application/json' } });
          }
          return { status: 201, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' };
        },
        { leaseMs: 600_000 },
      );
      const first = await send('/v1/charges', { key: 'stream-1', json: { a: 1 } });
      await assertProblem(first, 500, 'request-failed-retry');
      const [row] = await rows();
      assert.equal(row!.state, 'started');
      assert.equal(row!.recovery_point, 'charged', 'recovery point kept');
      assert.equal(row!.locked, false, 'lease released, not held for the rest of a 10-minute lease');
      const retry = await send('/v1/charges', { key: 'stream-1', json: { a: 1 } });
      assert.equal(retry.status, 201, 'the retry resumes at once (no 409)');
      assert.deepEqual(JSON.parse(await retry.text()), { ok: true });
      assert.equal(counter.H, 2);
      assert.equal(charged, 1, 'the committed phase is not repeated');
    },
  );

  it('a response past maxResponseBytes reaches the client whole; the key stores a response-too-large-to-keep problem and never runs again', GATED, async () => {
    const big = new Uint8Array(200_000).map((_, i) => i % 251);
    const { send, counter, rows } = await setup(() => ({ status: 200, headers: { 'content-type': 'application/octet-stream' }, body: big }), {
      maxResponseBytes: 10_000,
    });
    const first = await send('/v1/exports', { key: 'big-1', json: { a: 1 } });
    assert.equal(first.status, 200);
    assert.deepEqual(await bytes(first), big, 'the client gets every byte');
    const [row] = await rows();
    assert.equal(row!.state, 'done');
    assert.equal(row!.response_status, 500);
    const replay = await send('/v1/exports', { key: 'big-1', json: { a: 1 } });
    assert.equal(replay.headers.get('idempotent-replayed'), 'true');
    const problem = await assertProblem(replay, 500, 'response-too-large-to-keep');
    assert.match(String(problem.detail), /10000 bytes/);
    assert.equal(counter.H, 1, 'the handler ran once');
  });

  it('a returned 503 before any phase: Retry-After passed through, nothing stored, the retry runs the handler again', GATED, async () => {
    let unavailable = true;
    const { send, counter, count } = await setup(
      (): Reply =>
        unavailable
          ? { status: 503, headers: { 'retry-after': '7', 'content-type': 'text/plain' }, body: 'psp down' }
          : { status: 201, headers: { 'content-type': 'application/json' }, body: '{"ok":true}' },
    );
    const first = await send('/v1/charges', { key: 'down-1', json: { a: 1 } });
    assert.equal(first.status, 503);
    assert.equal(first.headers.get('retry-after'), '7');
    assert.equal(await first.text(), 'psp down');
    assert.equal(await count(), 0, 'the claim is freed');
    unavailable = false;
    const retry = await send('/v1/charges', { key: 'down-1', json: { a: 1 } });
    assert.equal(retry.status, 201);
    assert.equal(retry.headers.get('idempotent-replayed'), null);
    await retry.arrayBuffer();
    assert.equal(counter.H, 2);
  });

  it('a 503 after a phase committed, and any other returned 5xx, are stored and replayed', GATED, async () => {
    const { send, counter } = await setup(async (req, ctx) => {
      if (req.path.endsWith('/after-phase')) {
        await ctx!.phase('reserved', async () => 1);
        return { status: 503, headers: { 'retry-after': '3' }, body: 'later' };
      }
      return { status: 502, body: 'bad gateway' };
    });
    for (const path of ['/v1/after-phase', '/v1/bad-gateway']) {
      const status = path.endsWith('after-phase') ? 503 : 502;
      assert.equal((await send(path, { key: `k${path}`, json: {} })).status, status);
      const replay = await send(path, { key: `k${path}`, json: {} });
      assert.equal(replay.status, status);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true', path);
      await replay.arrayBuffer();
    }
    assert.equal(counter.H, 2);
  });

  it('getKey and a different Idempotency-Key header: 400, handler not run; the same key in both is fine', async () => {
    const { send, counter, count } = await setup(() => ({ status: 201, body: 'ok' }), {
      getKey: (request) => new URL(request.url, 'http://x').searchParams.get('token') ?? undefined,
    });
    const both = await send('/v1/orders?token=tok-1', { key: 'other', json: {} });
    const problem = await assertProblem(both, 400, 'idempotency-key-invalid');
    assert.match(String(problem.detail), /differs/);
    assert.equal(counter.H, 0);
    assert.equal(await count(), 0);
    const same = await send('/v1/orders?token=tok-1', { key: 'tok-1', json: {} });
    assert.equal(same.status, 201);
    await same.arrayBuffer();
    assert.equal(counter.H, 1);
  });

  for (const [name, options] of [
    ["fingerprintIgnore: ['/id']", { fingerprintIgnore: ['/id'] }],
    [
      'fingerprintProjection',
      { fingerprintProjection: (rpc: unknown) => ({ method: (rpc as { method: unknown }).method, params: (rpc as { params: unknown }).params }) },
    ],
  ] as const) {
    it(`JSON-RPC with ${name}: a retry with a new envelope id replays; other params get 422`, async () => {
      const { send, counter } = await setup(
        async (req) => ({
          status: 200,
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', result: 'paid', id: (await req.json<{ id: number }>()).id }),
        }),
        options,
      );
      const rpc = (id: number, amount: number) => ({ key: 'rpc-1', json: { jsonrpc: '2.0', method: 'charge', params: { amount }, id } });
      const first = await send('/rpc', rpc(1, 100));
      assert.equal(first.status, 200);
      await first.arrayBuffer();
      const retry = await send('/rpc', rpc(2, 100));
      assert.equal(retry.status, 200, 'not 422: the id is not part of the fingerprint');
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      await retry.arrayBuffer();
      await assertProblem(await send('/rpc', rpc(3, 999)), 422, 'idempotency-key-reused');
      assert.equal(counter.H, 1);
    });
  }
}

for (const engine of engines) {
  describe(`response edges over ${engine.name}`, () => {
    const db = useEngine(engine);
    for (const harness of harnesses) describe(harness.name, () => edges(harness, db.client, db.cleanup));
  });
}
