/**
 * One `next build` of examples/next per change of its inputs, shared by every test file that
 * needs it (test/adapters-next.test.ts, test/next.test.ts): the build is stamped with a hash
 * of the example's files, src/ and the installed Next version, and skipped when the stamp
 * matches. Concurrent test files take a lock (a directory) and the others wait for the stamp.
 */
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const NEXT_APP = path.join(ROOT, 'examples/next');
const STAMP = path.join(NEXT_APP, '.next', 'idem-build-stamp');
const LOCK = path.join(NEXT_APP, '.next-build.lock');

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (['.next', '.next-build.lock', 'node_modules', 'next-env.d.ts'].includes(entry.name)) return [];
    const full = path.join(dir, entry.name);
    return entry.isDirectory() ? files(full) : [full];
  });
}

function inputsHash(): string {
  const hash = createHash('sha256');
  hash.update(readFileSync(path.join(ROOT, 'node_modules/next/package.json')));
  for (const file of [...files(NEXT_APP), ...files(path.join(ROOT, 'src'))].sort()) {
    hash.update(file).update(readFileSync(file));
  }
  return hash.digest('hex');
}

const built = (hash: string) => existsSync(STAMP) && readFileSync(STAMP, 'utf8') === hash;

/** Builds examples/next unless an up-to-date build is there. @returns build time in ms (0 when reused) */
export async function ensureNextBuild(): Promise<number> {
  const hash = inputsHash();
  const started = performance.now();
  for (;;) {
    if (built(hash)) return 0;
    try {
      mkdirSync(LOCK);
    } catch {
      // Another test file is building: wait for it (a lock older than 15 min is a crashed run's).
      if (Date.now() - (statSync(LOCK, { throwIfNoEntry: false })?.mtimeMs ?? Date.now()) > 15 * 60_000) rmSync(LOCK, { recursive: true, force: true });
      await new Promise((r) => setTimeout(r, 500));
      continue;
    }
    try {
      if (built(hash)) return 0;
      await run(process.execPath, [path.join(ROOT, 'node_modules/next/dist/bin/next'), 'build', '--webpack', NEXT_APP]);
      writeFileSync(STAMP, hash);
      return performance.now() - started;
    } finally {
      rmSync(LOCK, { recursive: true, force: true });
    }
  }
}

function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, env: { ...process.env, NEXT_TELEMETRY_DISABLED: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c));
    child.stderr.on('data', (c: Buffer) => (output += c));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`next build exited with ${code}:\n${output}`))));
  });
}
