import type { IntentRecord, IntentStore } from './intent.js';

/**
 * Intents in a `Map`, for tests and short-lived scripts: nothing survives the process, so
 * `resumePending()` only finds intents of this process. Records are copied in and out, so a
 * caller cannot change a stored record by holding on to it.
 */
export class MemoryIntentStore implements IntentStore {
  readonly #records = new Map<string, IntentRecord>();

  async put(intent: IntentRecord): Promise<void> {
    this.#records.set(intent.key, structuredClone(intent));
  }

  async get(key: string): Promise<IntentRecord | undefined> {
    const record = this.#records.get(key);
    return record && structuredClone(record);
  }

  async list(): Promise<IntentRecord[]> {
    return [...this.#records.values()].map((r) => structuredClone(r));
  }

  async delete(key: string): Promise<void> {
    this.#records.delete(key);
  }
}
