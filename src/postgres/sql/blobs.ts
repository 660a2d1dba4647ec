import type { TableNames } from './table.js';

/**
 * `<table>_blobs`: out-of-line response bodies (the default `BlobStore`), at most one per
 * row. Its foreign key needs the plain table's (scope, key), so it exists in plain mode only.
 */
export function blobTableStatement({ t, blobs }: TableNames): string {
  return `CREATE TABLE IF NOT EXISTS ${blobs} (
        scope text  NOT NULL,
        key   text  NOT NULL,
        id    text  NOT NULL,
        body  bytea NOT NULL,
        PRIMARY KEY (scope, key),
        FOREIGN KEY (scope, key) REFERENCES ${t} (scope, key) ON DELETE CASCADE
      )`;
}

/** The statements on `<table>_blobs`. */
export function blobStatements({ blobs }: TableNames) {
  return {
    /**
     * Stores an out-of-line body, on the finish's own transaction and after its fenced UPDATE
     * (which holds the row lock, so the foreign key is satisfied and a lost lease rolls the blob
     * back too). A blob left by an earlier claim of the key is overwritten.
     * $1 scope, $2 key, $3 blob id, $4 body bytes.
     */
    blobPut: `INSERT INTO ${blobs} (scope, key, id, body) VALUES ($1, $2, $3, $4)
      ON CONFLICT (scope, key) DO UPDATE SET id = EXCLUDED.id, body = EXCLUDED.body`,

    /** Reads an out-of-line body for a replay. $1 scope, $2 key, $3 blob id. */
    blobGet: `SELECT body FROM ${blobs} WHERE scope = $1 AND key = $2 AND id = $3`,

    /**
     * Deletes one blob, only if it is still the one named (a newer claim's blob stays).
     * $1 scope, $2 key, $3 blob id.
     */
    blobDelete: `DELETE FROM ${blobs} WHERE scope = $1 AND key = $2 AND id = $3`,
  };
}
