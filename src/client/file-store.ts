import { createHash } from 'node:crypto';
import { mkdir, open, readdir, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { MissingDependencyError } from '../core/errors.js';
import { type IntentRecord, type IntentStore, parseIntentRecord } from './intent.js';

/**
 * Durable intents for Node: one JSON file per intent in `dir`, named by the SHA-256 of its key.
 * Each `put` is crash-safe through `write-file-atomic` (write a temporary file, fsync it, rename
 * it over the old one), followed by an fsync of the directory so the rename itself survives a
 * power loss: a reader sees the old record or the new one, never a torn one. A temporary file
 * left by a crash is never read (`list` only reads `*.json`).
 *
 * `write-file-atomic` is an optional peer dependency, loaded by the first `put`; without it that
 * `put` rejects with {@link MissingDependencyError}.
 *
 * One process per directory at a time is the intended use; two processes resuming the same
 * intent are still safe (the server deduplicates by key), they only do the work of one twice.
 */
export class FileIntentStore implements IntentStore {
  readonly dir: string;
  #ready: Promise<void> | undefined;

  /** @param options.dir the directory, created on first use */
  constructor(options: { dir: string }) {
    this.dir = options.dir;
  }

  async put(intent: IntentRecord): Promise<void> {
    await this.#mkdir();
    const writeFileAtomic = await loadWriteFileAtomic();
    await writeFileAtomic(this.#file(intent.key), JSON.stringify(intent), { fsync: true });
    await this.#fsyncDir();
  }

  async get(key: string): Promise<IntentRecord | undefined> {
    const text = await readFile(this.#file(key), 'utf8').catch(ifMissing(undefined));
    return text === undefined ? undefined : parseIntentRecord(JSON.parse(text));
  }

  async list(): Promise<IntentRecord[]> {
    const names = await readdir(this.dir).catch(ifMissing([] as string[]));
    const records: IntentRecord[] = [];
    for (const name of names) {
      if (!name.endsWith('.json')) continue;
      // Deleted since readdir (finished meanwhile): skip it.
      const text = await readFile(join(this.dir, name), 'utf8').catch(ifMissing(undefined));
      if (text !== undefined) records.push(parseIntentRecord(JSON.parse(text)));
    }
    return records;
  }

  async delete(key: string): Promise<void> {
    await unlink(this.#file(key)).catch(ifMissing(undefined));
    await this.#fsyncDir().catch(ifMissing(undefined));
  }

  #file(key: string): string {
    return join(this.dir, `${createHash('sha256').update(key).digest('hex')}.json`);
  }

  #mkdir(): Promise<void> {
    this.#ready ??= mkdir(this.dir, { recursive: true }).then(() => undefined);
    return this.#ready;
  }

  async #fsyncDir(): Promise<void> {
    const handle = await open(this.dir, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  }
}

/** A `.catch` handler that turns ENOENT into `value` and rethrows anything else. */
function ifMissing<T>(value: T): (error: NodeJS.ErrnoException) => T {
  return (error) => {
    if (error.code === 'ENOENT') return value;
    throw error;
  };
}

let writeFileAtomicModule: Promise<typeof import('write-file-atomic')> | undefined;

/** Loads the optional peer `write-file-atomic` once. @throws {MissingDependencyError} when it is not installed */
function loadWriteFileAtomic(): Promise<typeof import('write-file-atomic')> {
  writeFileAtomicModule ??= import('write-file-atomic').then(
    (module) => module.default,
    (error: unknown) => {
      writeFileAtomicModule = undefined;
      throw new MissingDependencyError('write-file-atomic', 'FileIntentStore', { cause: error });
    },
  );
  return writeFileAtomicModule;
}
