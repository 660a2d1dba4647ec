/**
 * Where one key's Durable Object keeps its state (key-object.ts): one read-modify-write of the
 * key's row and its last token, as ONE transaction of the object's storage. Two backends:
 * SQL storage on a SQLite-backed class (`transactionSync`: the statements run synchronously, so
 * nothing else runs in the object in between), the key-value API's `transaction` on a key-value
 * class. Either way the object is the key's only writer and every step sees the last one's
 * result (protocol.md K8: the fenced writes are compare-and-sets inside it).
 */
import type { Entry } from '../memory/entry.js';
import type { DurableObjectStorageLike, SqlStorageLike } from './workers-types.js';

/** One key's row as its object stores it: the memory store's entry and the retention its claim named. */
export interface KeyRow extends Entry {
  /** The claim's `retentionMs`: when the object's alarm may delete the row (protocol.md K6). */
  retentionMs: number;
}

/** The object's whole state: the row (absent: no key) and the last token drawn, kept across deletes (protocol.md K8). */
export interface CellState {
  row: KeyRow | undefined;
  lastToken: number;
}

/** A step on the state: mutates it and says whether to write it back. */
export type Step<R> = (state: CellState) => { result: R; write: boolean };

/** The object's storage, as steps see it. */
export interface Cell {
  /** Runs `step` in one transaction; a state with no row and token 0 is stored as nothing at all. */
  update<R>(step: Step<R>): Promise<R>;
}

/** The cell on `storage`: SQL storage when the class is SQLite-backed, else the key-value API. */
export function openCell(storage: DurableObjectStorageLike): Cell {
  let sql: SqlStorageLike | undefined;
  try {
    sql = storage.sql;
    sql?.exec('CREATE TABLE IF NOT EXISTS idem_key (id INTEGER PRIMARY KEY CHECK (id = 1), last_token INTEGER NOT NULL, row TEXT)');
  } catch {
    sql = undefined; // a key-value class: `sql` throws there
  }
  return sql && storage.transactionSync ? sqlCell(storage, sql) : kvCell(storage);
}

function sqlCell(storage: DurableObjectStorageLike, sql: SqlStorageLike): Cell {
  return {
    async update(step) {
      return storage.transactionSync!(() => {
        const found = sql.exec('SELECT last_token, row FROM idem_key WHERE id = 1').toArray()[0];
        const state: CellState = {
          row: typeof found?.row === 'string' ? (JSON.parse(found.row, revive) as KeyRow) : undefined,
          lastToken: Number(found?.last_token ?? 0),
        };
        const { result, write } = step(state);
        if (write && !state.row && state.lastToken === 0) sql.exec('DELETE FROM idem_key');
        else if (write) {
          const row = state.row ? JSON.stringify(state.row, replace) : null;
          sql.exec(
            'INSERT INTO idem_key (id, last_token, row) VALUES (1, ?, ?) ON CONFLICT (id) DO UPDATE SET last_token = excluded.last_token, row = excluded.row',
            state.lastToken,
            row,
          );
        }
        return result;
      });
    },
  };
}

function kvCell(storage: DurableObjectStorageLike): Cell {
  return {
    update(step) {
      return storage.transaction(async (txn) => {
        const state: CellState = { row: await txn.get<KeyRow>('row'), lastToken: (await txn.get<number>('lastToken')) ?? 0 };
        const { result, write } = step(state);
        if (write) {
          if (state.row) await txn.put('row', state.row);
          else await txn.delete('row');
          if (state.row || state.lastToken !== 0) await txn.put('lastToken', state.lastToken);
          else await txn.delete('lastToken');
        }
        return result;
      });
    },
  };
}

/** JSON of a row: bytes (fingerprint, response and request bodies) as `{ "$idem:bytes": base64 }`. */
function replace(this: unknown, _key: string, value: unknown): unknown {
  if (!(value instanceof Uint8Array)) return value;
  let text = '';
  for (let i = 0; i < value.length; i += 0x8000) text += String.fromCharCode(...value.subarray(i, i + 0x8000));
  return { [BYTES]: btoa(text) };
}

function revive(_key: string, value: unknown): unknown {
  if (value === null || typeof value !== 'object' || !(BYTES in value) || Object.keys(value).length !== 1) return value;
  const text = atob(String((value as Record<string, unknown>)[BYTES]));
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}

/** The tag of bytes in a row's JSON; a phase result (JSON of the application's) is never an object with this one member. */
const BYTES = '$idem:bytes';
