/**
 * A fresh, empty in-memory PGlite for a test, started from a copy of a freshly initialised
 * cluster instead of running initdb again: initdb is most of PGlite's start-up (about 3.5 s of
 * CPU of the 4.5 s a bare `pglite()` takes; from the copy, under 1 s). The copy is the
 * data directory `dumpDataDir` writes right after initdb, made once per PGlite version and
 * kept in node_modules/.cache, so a whole `npm test` runs initdb once. Each instance is its own
 * database: nothing is shared between instances but the bytes they start from.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const VERSION = (JSON.parse(readFileSync(path.join(ROOT, 'node_modules/@electric-sql/pglite/package.json'), 'utf8')) as { version: string }).version;
const CACHE = path.join(ROOT, 'node_modules', '.cache', 'idem-tests');
const TEMPLATE = path.join(CACHE, `pglite-${VERSION}-initdb.tar`);

/**
 * Writes the template: initdb in a child process (the constructor below is synchronous, as
 * `pglite()` is), to a temporary name then renamed, so concurrent test files never read
 * half a file.
 */
const MAKE_TEMPLATE = `
import { PGlite } from '@electric-sql/pglite';
import { renameSync, writeFileSync } from 'node:fs';
const [file] = process.argv.slice(-1);
const db = new PGlite();
await db.waitReady;
const dump = await db.dumpDataDir('none');
await db.close();
const tmp = file + '.' + process.pid;
writeFileSync(tmp, Buffer.from(await dump.arrayBuffer()));
renameSync(tmp, file);
`;

let template: Blob | undefined;

function loadTemplate(): Blob {
  if (!template) {
    if (!existsSync(TEMPLATE)) {
      mkdirSync(CACHE, { recursive: true });
      execFileSync(process.execPath, ['--input-type=module', '-e', MAKE_TEMPLATE, TEMPLATE], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
    }
    template = new Blob([readFileSync(TEMPLATE)]);
  }
  return template;
}

/** A new, empty in-memory PGlite, as `pglite()` makes one, without running initdb. */
export function pglite(): PGlite {
  return new PGlite({ loadDataDir: loadTemplate() });
}
