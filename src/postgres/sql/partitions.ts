import { literal, type TableNames } from './table.js';

/** Partitioned mode's daily partitions: create ahead, list, and drop past retention. */
export function partitionStatements({ table, t }: TableNames) {
  const schema = table.includes('.') ? `"${table.split('.')[0]}".` : '';
  const partition = (name: string) => `${schema}"${name}"`;
  return {
    /** Today's UTC date by the database clock, as YYYY-MM-DD. */
    today: `SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day`,

    /**
     * The table's daily partitions (named by `createPartition`), oldest first, with whether a
     * partition's whole day lies at or before the retention cutoff. $1 table name as given,
     * $2 retention ms.
     */
    listPartitions: `SELECT c.relname AS name,
        to_char(to_date(right(c.relname, 8), 'YYYYMMDD'), 'YYYY-MM-DD') AS day,
        (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
          <= now() - $2::int8 * interval '1 millisecond' AS expired
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = to_regclass($1) AND c.relname ~ '_p[0-9]{8}$'
      ORDER BY right(c.relname, 8)`,

    /** One UTC day's partition, [fromDay 00:00 UTC, toDay 00:00 UTC). Idempotent. */
    createPartition: (name: string, fromDay: string, toDay: string) =>
      `CREATE TABLE IF NOT EXISTS ${partition(name)} PARTITION OF ${t}
        FOR VALUES FROM (${literal(`${fromDay} 00:00:00+00`)}) TO (${literal(`${toDay} 00:00:00+00`)})`,

    /**
     * Before a drop: lock the partition against writes (SHARE: claims still read it), so no
     * takeover can start a lease in it between the check below and the drop.
     */
    lockPartition: (name: string) => `LOCK TABLE ${partition(name)} IN SHARE MODE`,

    /**
     * Rows in the partition and how many hold a valid lease (a worker alive past retention:
     * then the partition is kept).
     */
    partitionRows: (name: string) =>
      `SELECT count(*)::int8::text AS n, count(*) FILTER (WHERE locked_until > now())::int8::text AS live FROM ${partition(name)}`,

    /**
     * Retention for a whole day in one statement: no row-by-row delete, no dead tuples. It
     * takes a brief ACCESS EXCLUSIVE lock on the parent table, bounded by `setLockTimeout`.
     */
    dropPartition: (name: string) => `DROP TABLE ${partition(name)}`,

    /**
     * Bounds how long the drop may wait for (and so make claims queue behind) its locks, for the
     * rest of the transaction; on timeout the partition is kept for the next run. $1 e.g. '1000ms'.
     */
    setLockTimeout: `SELECT set_config('lock_timeout', $1::text, true)`,
  };
}
