/**
 * idem/next, idem/lambda and idem/koa as users get them: `npm pack` (which builds dist/),
 * the tarball unpacked into a scratch project's node_modules/idem (its dependencies and the
 * peers used linked from this repository's node_modules), and a child process importing the
 * subpaths by name through the package's `exports`. The packed idem/lambda then serves an
 * AWS-documented event on a PGlite store, replay included.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from './helpers/next-build.js';
import { fullMatrixOnly } from './helpers/services.js';

const run = promisify(execFile);

// npm pack builds dist/ (tsc): the full matrix only (npm run test:all), as `npm run check:pack`.
describe('the packed package: idem/next, idem/lambda, idem/koa', { skip: fullMatrixOnly() }, () => {
  let dir = '';
  before(
    async () => {
      dir = mkdtempSync(path.join(os.tmpdir(), 'idem-packed-'));
      const { stdout } = await run('npm', ['pack', '--silent', '--pack-destination', dir], { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 });
      const tarball = path.join(dir, stdout.trim().split('\n').at(-1)!);
      const modules = path.join(dir, 'node_modules');
      mkdirSync(path.join(modules, 'idem'), { recursive: true });
      await run('tar', ['-xzf', tarball, '-C', path.join(modules, 'idem'), '--strip-components=1']);
      const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
      for (const dep of [...Object.keys(pkg.dependencies), '@electric-sql/pglite']) {
        mkdirSync(path.dirname(path.join(modules, dep)), { recursive: true });
        symlinkSync(path.join(ROOT, 'node_modules', dep), path.join(modules, dep), 'dir');
      }
    },
    { timeout: 300_000 },
  );
  after(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('each subpath imports by name, and the packed idem/lambda replays a REST API event on PGlite', { timeout: 120_000 }, async () => {
    const event = readFileSync(path.join(ROOT, 'test/fixtures/lambda/rest-v1.json'), 'utf8');
    writeFileSync(
      path.join(dir, 'check.mjs'),
      `
import { withIdempotency as next } from 'idem/next';
import { withIdempotency, idempotency as middy } from 'idem/lambda';
import { idempotency as koa } from 'idem/koa';
import { PostgresStore } from 'idem/postgres';
import { PGlite } from '@electric-sql/pglite';
const out = { next: typeof next, lambda: typeof withIdempotency, middy: typeof middy, koa: typeof koa };
const store = new PostgresStore({ client: new PGlite(), table: 'idem_packed' });
await store.migrate();
let H = 0;
const handler = withIdempotency({ store }, async () => ({ statusCode: 201, body: 'run ' + ++H }));
const context = { getRemainingTimeInMillis: () => 10000 };
const event = ${event};
const first = await handler(structuredClone(event), context);
const replay = await handler(structuredClone(event), context);
out.results = [first.statusCode, first.body, replay.body, replay.headers['idempotent-replayed'], H];
console.log(JSON.stringify(out));
`,
    );
    const { stdout } = await run(process.execPath, ['check.mjs'], { cwd: dir });
    assert.deepEqual(JSON.parse(stdout), {
      next: 'function',
      lambda: 'function',
      middy: 'function',
      koa: 'function',
      results: [201, 'run 1', 'run 1', 'true', 1],
    });
  });
});
