/**
 * A fake payment service provider (PSP). It honours its own idempotency key the way Stripe
 * or Adyen do: the same key always yields the same charge, so a merchant that retries an
 * in-flight call with a derived key never charges twice. It keeps its own table and commits
 * on its own, as a remote system would.
 */
import { randomUUID } from 'node:crypto';
import type { Queryable } from 'idem/postgres';
import { isMySql } from './mysql.js';
import { type PaymentsStatements, STATEMENTS } from './statements.js';

export interface PspCharge {
  id: string;
  idempotency_key: string;
  amount: number;
  currency: string;
  customer: string;
  created_at: string;
}

export interface PspOptions {
  /** Latency of every call in ms. @default 50 */
  latencyMs?: number;
  /**
   * Probability (0-1) that a call fails with a 5xx-like error. Half of the failures happen
   * after the charge was recorded (the response was lost on the way back), so only the
   * idempotency key keeps a retry from charging twice.
   * @default 0
   */
  failureRate?: number;
}

/** Thrown for a simulated provider outage or lost response. */
export class PspUnavailableError extends Error {
  /** An outage, not a bad request: idem does not count it toward `maxAttempts`. */
  readonly transient = true;
  constructor(readonly charged: boolean) {
    super(charged ? 'PSP response lost after charging (simulated)' : 'PSP unavailable (simulated)');
    this.name = 'PspUnavailableError';
  }
}

export class FakePsp {
  readonly latencyMs: number;
  readonly failureRate: number;
  private readonly sql: PaymentsStatements;

  constructor(
    private readonly db: Queryable,
    options: PspOptions = {},
  ) {
    this.latencyMs = options.latencyMs ?? 50;
    this.failureRate = options.failureRate ?? 0;
    if (!(this.latencyMs >= 0)) throw new RangeError('PSP latencyMs must be >= 0');
    if (!(this.failureRate >= 0 && this.failureRate <= 1)) throw new RangeError('PSP failureRate must be within 0-1');
    this.sql = STATEMENTS[isMySql(db) ? 'mysql' : 'postgres'];
  }

  /**
   * Creates (or, for a known idempotency key, returns) a charge.
   *
   * @throws {PspUnavailableError} at `failureRate`
   */
  async charge(input: { idempotencyKey: string; amount: number; currency: string; customer: string }): Promise<PspCharge> {
    await sleep(this.latencyMs / 2);
    const fail = Math.random() < this.failureRate;
    const failBefore = fail && Math.random() < 0.5;
    if (failBefore) throw new PspUnavailableError(false);
    await this.db.query(this.sql.pspInsert, ['py_' + randomUUID().replaceAll('-', ''), input.idempotencyKey, input.amount, input.currency, input.customer]);
    const { rows } = await this.db.query(this.sql.pspByKey, [input.idempotencyKey]);
    await sleep(this.latencyMs / 2);
    if (fail) throw new PspUnavailableError(true);
    return rows[0] as unknown as PspCharge;
  }

  /** Every charge the PSP ever made, oldest first. */
  async list(): Promise<PspCharge[]> {
    const { rows } = await this.db.query(this.sql.pspList);
    return rows as unknown as PspCharge[];
  }
}

function sleep(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}
