/**
 * The server's key header option (protocol.md H4): `keyHeader` names the request header that
 * carries the key, like the client's option of the same name; `headerName`, its old name, is
 * still honoured (deprecated) when `keyHeader` is not set.
 */
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { freshStore } from './helpers/engines.js';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import { HttpIdempotency, type IdempotencyOptions, type Prepared } from '../src/http/idempotency.js';
import type { Queryable } from '../src/postgres/client.js';

const request = (headers: Record<string, string>) => ({
  method: 'POST',
  url: 'http://example.test/v1/charges',
  headers: new Headers({ 'content-type': 'application/json', authorization: 'Bearer secret', ...headers }),
  body: new TextEncoder().encode('{"amount":5}'),
});

describe('key header option', () => {
  let db: PGlite;
  let ctx: Awaited<ReturnType<typeof freshStore>>;
  const http = (options: Partial<IdempotencyOptions<Queryable>>) =>
    new HttpIdempotency<Queryable>({ store: ctx.store, heartbeatMs: 0, required: true, ...options });
  /** The key the request was claimed under, or the status idem answered with instead. */
  const outcome = async (prepared: Prepared<Queryable>): Promise<string | number> => {
    if (prepared.kind === 'execute') {
      await prepared.context.execution.release();
      return prepared.context.key;
    }
    assert.equal(prepared.kind, 'respond');
    return (prepared as Extract<Prepared<Queryable>, { kind: 'respond' }>).response.status;
  };

  before(async () => {
    db = pglite();
    await db.waitReady;
  });
  after(async () => {
    await db.close();
  });
  beforeEach(async () => {
    ctx = await freshStore(db);
  });
  afterEach(async () => {
    await ctx.drop();
  });

  it('keyHeader: the key is read from that header only', async () => {
    const h = http({ keyHeader: 'PayPal-Request-Id' });
    assert.equal(await outcome(await h.prepare(request({ 'paypal-request-id': 'k-custom' }))), 'k-custom');
    assert.equal(await outcome(await h.prepare(request({ 'idempotency-key': 'k-default' }))), 400, 'Idempotency-Key is not the key header any more');
  });

  it('headerName (deprecated) still names the key header; keyHeader wins when both are set', async () => {
    const old = http({ headerName: 'PayPal-Request-Id' });
    assert.equal(await outcome(await old.prepare(request({ 'paypal-request-id': 'k-old' }))), 'k-old');
    assert.equal(await outcome(await old.prepare(request({ 'idempotency-key': 'k-default' }))), 400);
    const both = http({ headerName: 'PayPal-Request-Id', keyHeader: 'X-Request-Key' });
    assert.equal(await outcome(await both.prepare(request({ 'x-request-key': 'k-new' }))), 'k-new');
    assert.equal(await outcome(await both.prepare(request({ 'paypal-request-id': 'k-old2' }))), 400);
  });
});
