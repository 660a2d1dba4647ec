/**
 * Bundles the `idem` executable (src/cli/main.ts) into dist/cli/main.js after `tsc` has built
 * the library. The CLI's own libraries (commander, cli-progress, ms) are bundled in, so they
 * are devDependencies: a library user installs none of them, and `npx idem` still runs. The
 * database drivers (pg, @electric-sql/pglite) stay optional peers, imported at run time only
 * when a command needs one. The licenses of the bundled packages are written next to the bundle.
 */
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const outfile = join(root, 'dist', 'cli', 'main.js');

const result = await build({
  entryPoints: [join(root, 'src', 'cli', 'main.ts')],
  outfile,
  bundle: true,
  platform: 'node',
  format: 'esm',
  target: 'node20',
  // The Redis clients (`--store redis://`) are optional peers like the drivers: never bundled.
  external: ['pg', '@electric-sql/pglite', '@opentelemetry/api', 'mysql2', 'mysql2/promise', '@redis/client', 'ioredis', '@valkey/valkey-glide'],
  // CommonJS dependencies call require() for Node built-ins; an ESM bundle needs one.
  banner: { js: "import { createRequire as __idemCreateRequire } from 'node:module';\nconst require = __idemCreateRequire(import.meta.url);" },
  legalComments: 'eof',
  metafile: true,
  logLevel: 'warning',
});
// tsc's map of the unbundled file no longer matches; program.js (commander) is in the bundle.
for (const file of ['main.js.map', 'program.js', 'program.js.map', 'program.d.ts']) {
  rmSync(join(root, 'dist', 'cli', file), { force: true });
}

const packages = new Set();
for (const input of Object.keys(result.metafile.inputs)) {
  // The innermost node_modules/<name>/ of the path (a nested copy is its own package).
  const matches = [...input.matchAll(/(?:^|\/)node_modules\/((?:@[^/]+\/)?[^/]+)\//g)];
  const last = matches.at(-1);
  if (last) packages.add(input.slice(0, last.index + last[0].length - 1).replace(/^\//, ''));
}
const notices = [...packages].sort().map((path) => {
  const dir = join(root, path);
  const { name, version, license } = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  const file = readdirSync(dir).find((f) => /^licen[cs]e/i.test(f));
  const text = file ? readFileSync(join(dir, file), 'utf8').trim() : `License: ${license}`;
  return `${name}@${version}\n\n${text}\n`;
});
writeFileSync(
  join(root, 'dist', 'cli', 'THIRD_PARTY_LICENSES.txt'),
  `The idem executable (dist/cli/main.js) bundles these packages:\n\n${notices.join('\n---\n\n')}`,
);
