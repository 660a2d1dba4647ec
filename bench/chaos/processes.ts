/**
 * What the chaos harnesses (bench/chaos/harness.ts, bench/chaos/gateway-harness.ts) share:
 * their worker slots, the processes to kill if the harness itself exits early, the bundling
 * that makes a restart take a fraction of a second, and small helpers over answers and time.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { PROBLEM_TYPE_PREFIX, ProblemKind } from '../../src/http/problem.js';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The problem type of a key ended by its attempts (protocol.md K23). */
export const FAILED_PERMANENTLY = PROBLEM_TYPE_PREFIX + ProblemKind.FailedPermanently;

/** A body parsed as JSON, or undefined. */
export function parseJson(body: Uint8Array): unknown {
  try {
    return JSON.parse(new TextDecoder().decode(body));
  } catch {
    return undefined;
  }
}

/** The `type` of a problem+json body, or undefined. */
export function problemType(body: Uint8Array): string | undefined {
  const type = (parseJson(body) as { type?: unknown } | undefined)?.type;
  return typeof type === 'string' ? type : undefined;
}

/** One worker process of a run, as the fault injector sees it. */
export interface Slot {
  index: number;
  child?: ChildProcess;
  port?: number;
  paused: boolean;
  killedByInjector: boolean;
  tail: string[];
}

/** Every worker process of every run in this process, killed if the harness itself exits early. */
export const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) {
    child.kill('SIGCONT');
    child.kill('SIGKILL');
  }
});

/**
 * Bundles a worker's entry point into one ESM file (dependencies stay external, resolved
 * from node_modules), so a restarted worker starts in a fraction of a second instead of
 * compiling TypeScript again: restarts must be fast for 100+ crashes to fit in one run.
 */
export async function bundleEntry(entry: string, name: string): Promise<string> {
  const outfile = join(ROOT, 'node_modules', '.cache', 'idem-chaos', `${name}-${process.pid}-${randomBytes(3).toString('hex')}.mjs`);
  await build({ entryPoints: [entry], bundle: true, platform: 'node', format: 'esm', target: 'node20', packages: 'external', outfile, logLevel: 'error' });
  return outfile;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export async function waitFor(condition: () => boolean, timeoutMs: number, message: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(message());
    await sleep(50);
  }
}
