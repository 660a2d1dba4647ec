/**
 * The slice of Cloudflare D1's Worker API (`D1Database`) that `D1Store` uses, declared here so
 * that neither `@cloudflare/workers-types` nor `wrangler types` is needed to import it: prepared
 * statements with bound values, their rows, and `batch`, which runs its statements in order as
 * one transaction (all or none). D1 has no interactive transaction: nothing else is used.
 */

/** What `all()` and `run()` resolve to: the rows (a write's `RETURNING` rows) and its metadata. */
export interface D1ResultLike<T = Record<string, unknown>> {
  results: T[];
  success: boolean;
  meta?: { changes?: number } & Record<string, unknown>;
}

/** `db.prepare(sql)`: bound with `bind(...values)`, run with `all`, `run` or `first`. */
export interface D1PreparedStatementLike {
  bind(...values: unknown[]): D1PreparedStatementLike;
  all<T = Record<string, unknown>>(): Promise<D1ResultLike<T>>;
  run<T = Record<string, unknown>>(): Promise<D1ResultLike<T>>;
  first<T = Record<string, unknown>>(column?: string): Promise<T | null>;
}

/** A D1 database binding (`env.DB`, wrangler `d1_databases`). */
export interface D1DatabaseLike {
  prepare(query: string): D1PreparedStatementLike;
  /** The statements in order, as one transaction: a statement that fails rolls every one back. */
  batch<T = Record<string, unknown>>(statements: D1PreparedStatementLike[]): Promise<Array<D1ResultLike<T>>>;
}
