import type { UseStore } from 'idb-keyval';
import { MissingDependencyError } from '../core/errors.js';
import { type IntentRecord, type IntentStore, parseIntentRecord } from './intent.js';

type IdbKeyval = typeof import('idb-keyval');

/**
 * Intents in the browser's IndexedDB through `idb-keyval`: database `dbName`, object store
 * `storeName`, one entry per intent keyed by its idempotency key. Each call is one IndexedDB
 * transaction and resolves when it has committed, so a record put before the first attempt
 * survives a reload or a crash of the tab. Larger than `localStorage` and usable from workers.
 *
 * `idb-keyval` is an optional peer dependency, loaded on first use (a server that imports
 * `idem/client` never needs it); without it the first call rejects with
 * {@link MissingDependencyError}. The database is opened on first use; in a runtime without
 * IndexedDB (Node) the first call rejects with `ReferenceError`.
 */
export class IndexedDbIntentStore implements IntentStore {
  readonly #dbName: string;
  readonly #storeName: string;
  #opened: Promise<{ idb: IdbKeyval; store: UseStore }> | undefined;

  /**
   * @param options.dbName default `'idem-client'`
   * @param options.storeName default `'intents'`
   */
  constructor(options: { dbName?: string; storeName?: string } = {}) {
    this.#dbName = options.dbName ?? 'idem-client';
    this.#storeName = options.storeName ?? 'intents';
  }

  async put(intent: IntentRecord): Promise<void> {
    const { idb, store } = await this.#open();
    // A plain copy: IndexedDB's structured clone would refuse a record with foreign prototypes.
    await idb.set(intent.key, JSON.parse(JSON.stringify(intent)), store);
  }

  async get(key: string): Promise<IntentRecord | undefined> {
    const { idb, store } = await this.#open();
    const value: unknown = await idb.get(key, store);
    return value === undefined ? undefined : parseIntentRecord(value);
  }

  async list(): Promise<IntentRecord[]> {
    const { idb, store } = await this.#open();
    return (await idb.values(store)).map(parseIntentRecord);
  }

  async delete(key: string): Promise<void> {
    const { idb, store } = await this.#open();
    await idb.del(key, store);
  }

  #open(): Promise<{ idb: IdbKeyval; store: UseStore }> {
    this.#opened ??= import('idb-keyval').then(
      (idb) => ({ idb, store: idb.createStore(this.#dbName, this.#storeName) }),
      (error: unknown) => {
        throw new MissingDependencyError('idb-keyval', 'IndexedDbIntentStore', { cause: error });
      },
    );
    return this.#opened;
  }
}
