/**
 * A cron job that runs at most once per day, whatever the scheduler does: two schedulers firing
 * at once, a retry after a timeout, a re-run by hand. The day is the key; the totals row and the
 * report row commit in atomic phases, and the summary is stored and returned to every later run.
 * Run by test/function-examples.test.ts.
 */
import type { PostgresStore, Queryable } from 'idem/postgres';
import { idempotent } from 'idem/function';

// #region cron
export interface DaySummary {
  day: string;
  orders: number;
  revenueCents: number;
}

/** `closeDay('2026-03-01')` from the scheduler: a second call for the day returns the first summary. */
export function dailyClose(store: PostgresStore) {
  return idempotent(
    async (ctx, day: string): Promise<DaySummary> => {
      const totals = await ctx.phase('totals', async (tx: Queryable) => {
        const { rows } = await tx.query(
          `SELECT count(*)::int AS orders, coalesce(sum(amount_cents), 0)::int AS revenue FROM orders WHERE created_at::date = $1::date`,
          [day],
        );
        await tx.query('INSERT INTO day_totals (day, orders, revenue_cents) VALUES ($1, $2, $3)', [day, rows[0]!.orders, rows[0]!.revenue]);
        return { orders: Number(rows[0]!.orders), revenueCents: Number(rows[0]!.revenue) };
      });
      // The report mail: the derived key makes the mailer drop a resend after a crash here.
      await ctx.call('report_sent', async (mailKey) => sendReport(day, totals, mailKey));
      return { day, ...totals };
    },
    { store, name: 'daily-close', key: (day) => day, retentionMs: 40 * 24 * 3600_000 },
  );
}
// #endregion cron

/** Stands in for a mailer with idempotency keys; records what it was asked to send. */
export const sentReports: Array<{ day: string; key: string }> = [];
async function sendReport(day: string, _totals: unknown, key: string): Promise<{ sent: true }> {
  if (!sentReports.some((r) => r.key === key)) sentReports.push({ day, key });
  return { sent: true };
}

export const CRON_SCHEMA = `
  CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, amount_cents int NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
  CREATE TABLE IF NOT EXISTS day_totals (day date PRIMARY KEY, orders int NOT NULL, revenue_cents int NOT NULL);
`;
