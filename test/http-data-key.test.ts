/**
 * The HTTP middleware's `getKey` (a key from a body field, EC2 `ClientToken` style) is a key
 * from data (protocol.md K47): any non-empty string, stored as `dataKey` maps it (`sha256:` and
 * the hex digest outside 1-255 printable ASCII), like the Lambda batches, the consumer and the
 * webhooks. The `Idempotency-Key` header keeps the draft's syntax (protocol.md H5). Over a real
 * socket on every HTTP harness (web core, Hono, Express), on PGlite and PostgreSQL.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { HttpRequestInput, IdempotencyOptions } from '../src/http/idempotency.js';
import type { Queryable } from '../src/postgres/client.js';
import { harnesses, type AdapterHarness } from './helpers/adapter-harness.js';
import { engines, freshStore, useEngine } from './helpers/engines.js';
import { assertProblem, keyRows, requestInit, type Send } from './helpers/http.js';

/** The stored key of a key outside 1-255 printable ASCII, computed apart from idem's code. */
const hashed = (key: string) => `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
const COMPOSITE = `tenant#Zoë#${'order-line;'.repeat(26)}end`; // 300 characters

/** `getKey` over the JSON body's `clientToken` (undefined when there is none). */
function clientToken(request: HttpRequestInput): string | undefined {
  if (!request.body) return undefined;
  return (JSON.parse(new TextDecoder().decode(request.body)) as { clientToken?: string }).clientToken;
}

function dataKeys(harness: AdapterHarness, engine: (typeof engines)[number]): void {
  const { client: db, cleanup } = useEngine(engine);

  async function setup(options: Partial<IdempotencyOptions<Queryable>> = {}) {
    const { store, table, drop } = await freshStore(db());
    cleanup(drop);
    const counter = { H: 0 };
    const app = harness.build(
      { store, getKey: clientToken, onHandlerError: () => undefined, ...options },
      () => ({ status: 201, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ order: ++counter.H }) }),
      cleanup,
    );
    const base = await app.serve();
    const send = (s: Send) => fetch(`${base}/v1/orders`, requestInit(s));
    return { counter, send, keys: async () => (await keyRows(db(), table)).map((r) => r.key) };
  }

  for (const [name, token] of [
    ['a non-ASCII token (customer#Zoë)', 'customer#Zoë'],
    ['a 300-character composite token', COMPOSITE],
    ['a token with a control character', 'order\t42'],
  ] as const) {
    it(`${name} in the body: runs once, stored as its sha256 mapping, the retry replays`, async () => {
      const { send, counter, keys } = await setup();
      const first = await send({ json: { clientToken: token, amount: 100 } });
      assert.equal(first.status, 201, await first.clone().text());
      assert.deepEqual(await first.json(), { order: 1 });
      const retry = await send({ json: { clientToken: token, amount: 100 } });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.deepEqual(await retry.json(), { order: 1 });
      assert.equal(counter.H, 1);
      assert.deepEqual(await keys(), [hashed(token)]);
    });
  }

  it('a printable-ASCII token is stored as it is; an empty one is 400 idempotency-key-invalid, nothing claimed', async () => {
    const { send, counter, keys } = await setup();
    const plain = await send({ json: { clientToken: 'tok-1' } });
    assert.equal(plain.status, 201);
    await plain.arrayBuffer();
    const empty = await send({ json: { clientToken: '' } });
    await assertProblem(empty, 400, 'idempotency-key-invalid');
    assert.equal(counter.H, 1);
    assert.deepEqual(await keys(), ['tok-1']);
  });

  it('the Idempotency-Key header keeps the draft syntax: a 300-character header is 400, nothing claimed', async () => {
    const { send, counter, keys } = await setup({ getKey: undefined });
    const long = await send({ key: 'k'.repeat(300), json: {} });
    await assertProblem(long, 400, 'idempotency-key-invalid');
    assert.equal(counter.H, 0);
    assert.deepEqual(await keys(), []);
  });
}

for (const engine of engines) {
  for (const harness of harnesses) {
    describe(`HTTP getKey is a data key (K47): ${harness.name} on ${engine.name}`, () => dataKeys(harness, engine));
  }
}
