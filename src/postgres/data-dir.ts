/**
 * The one-process lock of a PGlite data directory, shared by the `idem` CLI and applications
 * (the example server): `lockDataDir`, exported by idem/postgres.
 */
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DataDirLockedError } from './errors.js';

/**
 * PGlite is one PostgreSQL backend inside this process: a second process on the same directory
 * would run its own, unaware of the first one's claims, and both would execute the same key. So
 * one process per directory, through one pid file taken with O_EXCL (`idem-example.pid`), shared
 * by the CLI and the example server: each refuses a directory a live process holds, and takes
 * over a pid file whose process is gone (killed, crashed), so a restart right after a crash
 * works at once (an mtime-based staleness rule would make it wait).
 *
 * @param inUse the error for a directory held by the live process `holder`
 * @returns a function that releases the lock
 * @throws the `inUse` error (default a {@link DataDirLockedError}) when a live process holds the directory
 * @throws {DataDirLockedError} when the pid file cannot be written
 */
export function lockDataDir(
  dataDir: string,
  inUse: (holder: number) => Error = (holder) =>
    new DataDirLockedError(`${dataDir} is in use by process ${holder} (PGlite allows one process per data directory): stop it, or use --database-url`),
): () => void {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'idem-example.pid');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(file, String(process.pid), { flag: 'wx' });
      return () => rmSync(file, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST')
        throw new DataDirLockedError(`cannot lock ${dataDir}: ${(error as Error).message}`, { cause: error });
      const holder = Number(readFileSync(file, 'utf8'));
      if (holder && holder !== process.pid && alive(holder)) throw inUse(holder);
      rmSync(file, { force: true }); // left by a process that is gone
    }
  }
  throw new DataDirLockedError(`cannot lock ${dataDir}`);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
