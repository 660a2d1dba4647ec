/**
 * The example payments server as a child process (`node --import tsx examples/payments/server.ts`)
 * for its end-to-end tests. A start waits for the server's readiness line ("listening on …") or
 * its exit, with the generous ceiling of ../process.ts, never a short fixed timeout: on a busy
 * two-core machine a server can take tens of seconds to come up.
 */
import { CHILD_READY_TIMEOUT_MS, exitOf, spawnTs, stopChild, type Child, type Exit } from '../process.js';
import type { Database } from './databases.js';

const SERVER = 'examples/payments/server.ts';

/** A running server. */
export interface Server {
  url: string;
  port: number;
  child: Child['child'];
  /** Resolves when the process has exited. */
  exited: Promise<Exit>;
  output(): string;
  /** SIGTERM, then SIGKILL after 5 s; resolves when the process is gone. */
  stop(): Promise<void>;
}

/** The server's environment on `db`: port 0 on loopback, a 20 ms PSP, then `extraEnv`. */
function serverEnv(db: Database, extraEnv: Record<string, string>): Record<string, string> {
  return { ...db.env, PORT: '0', HOST: '127.0.0.1', PSP_LATENCY_MS: '20', ...extraEnv };
}

/** Runs a server that is expected not to start: resolves with its exit and its whole output. */
export async function runUntilExit(db: Database, extraEnv: Record<string, string>): Promise<Exit & { output: string }> {
  const child = spawnTs(SERVER, serverEnv(db, extraEnv));
  const exit = await exitOf(child, CHILD_READY_TIMEOUT_MS);
  return { ...exit, output: child.output() };
}

/**
 * Starts a server on `db` and resolves once it printed its address; rejects if it exits first
 * or prints nothing within the ceiling (then it is killed).
 */
export async function startServer(db: Database, extraEnv: Record<string, string> = {}): Promise<Server> {
  const child = spawnTs(SERVER, serverEnv(db, extraEnv));
  const match = await child.waitFor(/listening on (http:\/\/127\.0\.0\.1:(\d+))/).catch(async (error: unknown) => {
    await child.kill();
    throw error;
  });
  return {
    url: match[1]!,
    port: Number(match[2]),
    child: child.child,
    exited: child.exited,
    output: child.output,
    stop: () => stopChild(child),
  };
}
