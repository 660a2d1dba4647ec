/** The MySQL statements' clock (sql.ts, sql-operator.ts): the server's, in UTC with microseconds. */

/** The server's clock, UTC with microseconds, fixed within one statement. */
export const NOW = 'UTC_TIMESTAMP(6)';
/** Lease end or start of retention: now plus or minus `?` microseconds. */
export const later = `${NOW} + INTERVAL ? MICROSECOND`;
export const earlier = `${NOW} - INTERVAL ? MICROSECOND`;
/** A DATETIME(6) column as epoch milliseconds (an integer). */
export const epochMs = (column: string) => `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ${column}) DIV 1000`;
/** The lease is not valid: none, or ended by the server's clock. */
export const LEASE_OVER = `(locked_until IS NULL OR locked_until <= ${NOW})`;
