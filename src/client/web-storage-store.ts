import { type IntentRecord, type IntentStore, parseIntentRecord } from './intent.js';

/** The slice of the Web Storage API (`localStorage`) the store uses, declared locally. */
export interface WebStorageLike {
  readonly length: number;
  key(index: number): string | null;
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/**
 * Intents in the browser's `localStorage` (or any Web Storage), one item per intent under
 * `prefix + key`, written as JSON. `setItem` is synchronous and survives a reload or a crash of
 * the tab, which is what "persisted before the first attempt" needs. Storage is per origin and
 * small (about 5 MiB): keep bodies small, or use `IndexedDbIntentStore`.
 *
 * Throws `TypeError` at construction when no storage is given and `globalThis.localStorage` is
 * missing (Node, a worker); `put` throws the browser's `QuotaExceededError` when storage is full.
 */
export class LocalStorageIntentStore implements IntentStore {
  readonly #storage: WebStorageLike;
  readonly #prefix: string;

  /**
   * @param options.storage default `globalThis.localStorage`
   * @param options.prefix item-name prefix, default `'idem:intent:'`
   */
  constructor(options: { storage?: WebStorageLike; prefix?: string } = {}) {
    const storage = options.storage ?? (globalThis as { localStorage?: WebStorageLike }).localStorage;
    if (!storage) throw new TypeError('LocalStorageIntentStore: no localStorage in this runtime; pass options.storage');
    this.#storage = storage;
    this.#prefix = options.prefix ?? 'idem:intent:';
  }

  async put(intent: IntentRecord): Promise<void> {
    this.#storage.setItem(this.#prefix + intent.key, JSON.stringify(intent));
  }

  async get(key: string): Promise<IntentRecord | undefined> {
    const raw = this.#storage.getItem(this.#prefix + key);
    return raw === null ? undefined : parseIntentRecord(JSON.parse(raw));
  }

  async list(): Promise<IntentRecord[]> {
    const records: IntentRecord[] = [];
    for (let i = 0; i < this.#storage.length; i++) {
      const name = this.#storage.key(i);
      if (name === null || !name.startsWith(this.#prefix)) continue;
      const raw = this.#storage.getItem(name);
      if (raw !== null) records.push(parseIntentRecord(JSON.parse(raw)));
    }
    return records;
  }

  async delete(key: string): Promise<void> {
    this.#storage.removeItem(this.#prefix + key);
  }
}
