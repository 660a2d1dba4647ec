/**
 * The SQLite guide's example (examples/sqlite/app.ts, docs/guides/sqlite.md) run as the guide
 * shows it, on a file: the same request twice gives a byte-identical replay, the same key with
 * another body 422, and 16 concurrent duplicates one order row.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { createApp } from '../examples/sqlite/app.js';
import { scratchFile } from './helpers/sqlite-stores.js';

const order = (key: string, total: number) =>
  new Request('http://app.test/v1/orders', {
    method: 'POST',
    headers: { 'idempotency-key': key, 'content-type': 'application/json' },
    body: JSON.stringify({ total }),
  });

describe('examples/sqlite/app.ts', () => {
  const scratch = scratchFile();
  const opened = createApp(scratch.file);
  after(async () => {
    (await opened).db.close();
    scratch.remove();
  });
  const orders = async () => Number(((await opened).db.prepare('SELECT COUNT(*) AS n FROM orders').all()[0] as { n: number }).n);

  it('replays the same request byte for byte and answers another body under the key with 422', async () => {
    const { app } = await opened;
    const first = await app.fetch(order('k-1', 1200));
    assert.equal(first.status, 201);
    const again = await app.fetch(order('k-1', 1200));
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(await again.text(), await first.text());
    assert.equal((await app.fetch(order('k-1', 1300))).status, 422);
    assert.equal(await orders(), 1);
  });

  it('makes one order for 16 concurrent duplicates', async () => {
    const { app } = await opened;
    const answers = await Promise.all(Array.from({ length: 16 }, () => app.fetch(order('k-2', 500))));
    for (const answer of answers) assert.ok(answer.status === 201 || answer.status === 409, String(answer.status));
    assert.equal(await orders(), 2);
  });
});
