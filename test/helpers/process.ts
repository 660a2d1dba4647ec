/**
 * Child processes in tests, written once: spawn a TypeScript file under tsx with a scrubbed
 * environment, collect its output, and wait for a readiness line or for its exit. Every wait
 * has a generous ceiling (two minutes by default): on a loaded two-core machine a tsx child can
 * take tens of seconds to print its first line, and a wait that gives up early fails a test
 * whose behaviour was fine. Children still running when the test process exits are killed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository root: children run from it. */
export const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** How long a wait on a child's readiness line or exit may take before the test fails: 120 000 ms. */
export const CHILD_READY_TIMEOUT_MS = 120_000;

const children = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

/** Environment of the parent that must not leak into a child (the test runner's, the server's). */
const SCRUBBED = /^(DATABASE_URL|REDIS_URL|IDEM_|PSP_|PAYMENTS_|PORT$|HOST$|PG_POOL_MAX$|NODE_TEST_CONTEXT$|NODE_OPTIONS$)/;

/** `process.env` without the variables in {@link SCRUBBED}, plus `extra`. */
export function childEnv(extra: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) if (value !== undefined && !SCRUBBED.test(name)) env[name] = value;
  return Object.assign(env, extra);
}

/** How a child ended. */
export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** A child process running a TypeScript file under tsx, its output (stdout and stderr) collected. */
export interface Child {
  child: ChildProcess;
  output(): string;
  exited: Promise<Exit>;
  /**
   * Resolves with the first match of `pattern` in the output; rejects when the child exits
   * without printing it, or after `timeoutMs` (the child is left running: kill it).
   * @default timeoutMs {@link CHILD_READY_TIMEOUT_MS}
   */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpExecArray>;
  /** Sends `signal` (default SIGKILL) and resolves once the child is gone; at once if it already is. */
  kill(signal?: NodeJS.Signals): Promise<void>;
}

/** Spawns `node --import tsx <file> ...args` in {@link ROOT} with {@link childEnv}`(env)`. */
export function spawnTs(file: string, env: Record<string, string>, args: string[] = []): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', file, ...args], { cwd: ROOT, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  let output = '';
  const listeners = new Set<() => void>();
  const onData = (d: Buffer) => {
    output += d.toString();
    for (const l of listeners) l();
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<Exit>((resolve) =>
    child.once('exit', (code, signal) => {
      children.delete(child);
      for (const l of listeners) l();
      resolve({ code, signal });
    }),
  );
  const gone = () => child.exitCode !== null || child.signalCode !== null;
  return {
    child,
    output: () => output,
    exited,
    waitFor(pattern, timeoutMs = CHILD_READY_TIMEOUT_MS) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => done(new Error(`timed out after ${timeoutMs} ms waiting for ${pattern} in the output of ${file}:\n${output}`)),
          timeoutMs,
        );
        const check = () => {
          const match = pattern.exec(output);
          if (match) return done(undefined, match);
          if (gone()) done(new Error(`${file} exited (code ${child.exitCode}, signal ${child.signalCode}) before printing ${pattern}:\n${output}`));
        };
        const done = (error?: Error, match?: RegExpExecArray) => {
          clearTimeout(timer);
          listeners.delete(check);
          if (error) reject(error);
          else resolve(match!);
        };
        listeners.add(check);
        check();
      });
    },
    async kill(signal = 'SIGKILL') {
      if (gone()) return;
      child.kill(signal);
      await exited;
    },
  };
}

/**
 * Waits for `child` to exit, at most `timeoutMs`; then kills it (SIGKILL) and still resolves
 * with how it ended, so the caller's assertion on the exit code names what happened.
 */
export async function exitOf(child: Child, timeoutMs = CHILD_READY_TIMEOUT_MS): Promise<Exit> {
  const timer = setTimeout(() => child.child.kill('SIGKILL'), timeoutMs);
  try {
    return await child.exited;
  } finally {
    clearTimeout(timer);
  }
}

/** Stops `child` with SIGTERM, then SIGKILL after `graceMs`; resolves once it is gone. */
export async function stopChild(child: Child, graceMs = 5000): Promise<void> {
  if (child.child.exitCode !== null || child.child.signalCode !== null) return;
  child.child.kill('SIGTERM');
  const timer = setTimeout(() => child.child.kill('SIGKILL'), graceMs);
  try {
    await child.exited;
  } finally {
    clearTimeout(timer);
  }
}
