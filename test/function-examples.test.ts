/**
 * The examples under examples/function/ (the guide docs/guides/functions.md shows them), each on
 * a fresh PGlite database: a daily cron job run twice at once and again by hand, and a command
 * bus whose commands are resent.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { pglite } from './helpers/pglite.js';
import { PostgresStore } from '../src/postgres/index.js';
import { KeyInProgressError, KeyMismatchError } from '../src/function/index.js';
import { CRON_SCHEMA, dailyClose, sentReports } from '../examples/function/cron.js';
import { BUS_SCHEMA, commandBus } from '../examples/function/command-bus.js';

async function database(schema: string) {
  const db = pglite();
  await db.exec(schema);
  const store = new PostgresStore({ client: db });
  await store.migrate();
  return { db, store };
}

describe('examples/function', () => {
  it('cron: two schedulers at once and a re-run by hand close the day once, send one report, and all get the same summary', async () => {
    const { db, store } = await database(CRON_SCHEMA);
    try {
      await db.query(`INSERT INTO orders (amount_cents, created_at) VALUES (500, '2026-03-01T10:00:00Z'), (700, '2026-03-01T11:00:00Z')`);
      const closeDay = dailyClose(store);
      const [a, b] = await Promise.allSettled([closeDay('2026-03-01'), closeDay('2026-03-01')]);
      const done = [a, b].filter((r) => r.status === 'fulfilled');
      // The second scheduler either found the key held (KeyInProgressError) or the first one done.
      for (const r of [a, b]) if (r.status === 'rejected') assert.ok(r.reason instanceof KeyInProgressError, String(r.reason));
      assert.ok(done.length >= 1);
      const again = await closeDay('2026-03-01');
      assert.deepEqual(again, { day: '2026-03-01', orders: 2, revenueCents: 1200 });
      const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM day_totals');
      assert.equal(rows[0]!.n, 1);
      assert.equal(sentReports.filter((r) => r.day === '2026-03-01').length, 1);
    } finally {
      await db.close();
    }
  });

  it('command bus: a resent command returns the first result; the same id with another payload is refused', async () => {
    const { db, store } = await database(BUS_SCHEMA);
    try {
      const bus = commandBus(store);
      const placed = await bus.dispatch({ id: 'cmd-1', type: 'PlaceOrder', customer: 'ada', amountCents: 1200 });
      assert.deepEqual(await bus.dispatch({ id: 'cmd-1', type: 'PlaceOrder', customer: 'ada', amountCents: 1200 }), placed);
      await assert.rejects(bus.dispatch({ id: 'cmd-1', type: 'PlaceOrder', customer: 'ada', amountCents: 9999 }), KeyMismatchError);
      const cancel = { id: 'cmd-2', type: 'CancelOrder', orderId: placed.orderId } as const;
      assert.deepEqual(await bus.dispatch(cancel), { cancelled: true });
      // The resend replays "cancelled: true"; run again it would say false.
      assert.deepEqual(await bus.dispatch(cancel), { cancelled: true });
      const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM orders');
      assert.equal(rows[0]!.n, 1);
    } finally {
      await db.close();
    }
  });
});
