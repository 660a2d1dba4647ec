/**
 * Generates the test suite's Prisma client (schema.prisma next to this file) into ./generated,
 * which is not committed: `npm run prisma:generate` (run before `npm run typecheck`, so before
 * `npm test`) and, when it is missing, the Prisma store entry's `connect()`.
 *
 * No download: Prisma 7's client runs on @prisma/adapter-pg with its query compiler in
 * WebAssembly (in @prisma/client). The CLI still wants its schema-engine binary before any
 * `generate` and fetches it from binaries.prisma.sh when missing, though `generate` never runs
 * it; PRISMA_SCHEMA_ENGINE_BINARY (Prisma's documented "custom engine" override) points it at
 * ./no-schema-engine, a stand-in that fails if anything ever runs it.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = dirname(fileURLToPath(import.meta.url));
const out = join(dir, 'generated');

/**
 * Writes the client unless it exists (`force`: always). Parallel test processes may call it at
 * once: each generates into its own directory and the first rename wins.
 * @throws {Error} with Prisma's output when `prisma generate` fails
 */
export function generatePrismaClient(options: { force?: boolean } = {}): void {
  if (!options.force && existsSync(join(out, 'client.ts'))) return;
  const tag = `.gen-${process.pid}-${Date.now()}`;
  const schema = join(dir, `${tag}.prisma`);
  const text = readFileSync(join(dir, 'schema.prisma'), 'utf8');
  writeFileSync(schema, text.replace(/output\s*=\s*"\.\/generated"/, `output = "./${tag}"`));
  try {
    const cli = join(dir, '../../../node_modules/prisma/build/index.js');
    const run = spawnSync(process.execPath, [cli, 'generate', '--schema', schema], {
      cwd: dir,
      encoding: 'utf8',
      env: {
        ...process.env,
        PRISMA_SCHEMA_ENGINE_BINARY: process.env.PRISMA_SCHEMA_ENGINE_BINARY ?? join(dir, 'no-schema-engine'),
        CHECKPOINT_DISABLE: '1', // no version check against checkpoint.prisma.io
        PRISMA_HIDE_UPDATE_MESSAGE: '1',
      },
    });
    if (run.status !== 0) throw new Error(`prisma generate failed (exit ${run.status}):\n${run.stderr}${run.stdout}`);
    if (options.force) rmSync(out, { recursive: true, force: true });
    try {
      renameSync(join(dir, tag), out);
    } catch (error) {
      if (!existsSync(join(out, 'client.ts'))) throw error; // else another process was first
    }
  } finally {
    rmSync(schema, { force: true });
    rmSync(join(dir, tag), { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) generatePrismaClient({ force: true });
