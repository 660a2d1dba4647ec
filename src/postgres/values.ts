/**
 * Column values as idem reads them, whatever the driver: the one place where a driver's own
 * value types meet the types idem's row decoding expects (node-postgres's, the reference).
 *
 * - `int8` and `numeric`: node-postgres gives strings; PGlite and postgres.js (`types: { bigint }`)
 *   a bigint; Prisma a bigint and a Decimal (decimal.js). Rows are read with `Number(…)` and
 *   `String(…)`, which take a string or a bigint alike; a Prisma row is first made to look like
 *   node-postgres's ({@link nodePostgresValue}), as `String()` of a Decimal drops trailing zeros.
 * - `timestamptz`: a Date from most drivers, ISO text from some (a JSON-built column, or a
 *   driver told to keep text): {@link timestamp}.
 * - `bytea`: a Buffer or a Uint8Array: {@link bytes}.
 */

/**
 * A value as node-postgres would give it: a bigint (`int8`) and a Decimal (`numeric`, decimal.js,
 * as Prisma reads them) as their text; anything else as it is.
 */
export function nodePostgresValue(value: unknown): unknown {
  if (typeof value === 'bigint') return String(value);
  if (value !== null && typeof value === 'object' && Object.prototype.toString.call(value) === '[object Decimal]') return String(value);
  return value;
}

/** A `timestamptz` column (a Date, or its text) as a Date. */
export function timestamp(value: unknown): Date {
  return value instanceof Date ? value : new Date(String(value));
}

/** A `timestamptz` column as a Date, or null for NULL. */
export function dateOrNull(value: unknown): Date | null {
  return value === null || value === undefined ? null : timestamp(value);
}

/**
 * A bytea column as a Uint8Array (a Buffer from pg is viewed, not copied); NULL as empty.
 * @throws {TypeError} for anything else
 */
export function bytes(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  if (value === null || value === undefined) return new Uint8Array(0);
  throw new TypeError('idem/postgres: expected bytea as Uint8Array');
}
