import { createStore, del, get, set, values, type UseStore } from 'idb-keyval';
import { type IntentRecord, type IntentStore, parseIntentRecord } from './intent.js';

/**
 * Intents in the browser's IndexedDB through `idb-keyval`: database `dbName`, object store
 * `storeName`, one entry per intent keyed by its idempotency key. Each call is one IndexedDB
 * transaction and resolves when it has committed, so a record put before the first attempt
 * survives a reload or a crash of the tab. Larger than `localStorage` and usable from workers.
 *
 * The database is opened on first use; in a runtime without IndexedDB (Node) the first call
 * rejects with `ReferenceError`.
 */
export class IndexedDbIntentStore implements IntentStore {
  readonly #store: UseStore;

  /**
   * @param options.dbName default `'idem-client'`
   * @param options.storeName default `'intents'`
   */
  constructor(options: { dbName?: string; storeName?: string } = {}) {
    this.#store = createStore(options.dbName ?? 'idem-client', options.storeName ?? 'intents');
  }

  async put(intent: IntentRecord): Promise<void> {
    // A plain copy: IndexedDB's structured clone would refuse a record with foreign prototypes.
    await set(intent.key, JSON.parse(JSON.stringify(intent)), this.#store);
  }

  async get(key: string): Promise<IntentRecord | undefined> {
    const value: unknown = await get(key, this.#store);
    return value === undefined ? undefined : parseIntentRecord(value);
  }

  async list(): Promise<IntentRecord[]> {
    return (await values(this.#store)).map(parseIntentRecord);
  }

  async delete(key: string): Promise<void> {
    await del(key, this.#store);
  }
}
