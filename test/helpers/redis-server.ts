/**
 * A redis-server of the test's own on a random loopback port, for faults that kill the server
 * (never the machine's shared Redis): SIGKILL it, start it again on the same port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createConnection, createServer, type AddressInfo } from 'node:net';

/** A redis-server the test may kill. */
export interface OwnRedis {
  port: number;
  /** SIGKILLs the server and resolves once it is gone. */
  kill(): Promise<void>;
  /** Starts it again on the same port (empty: no persistence) and resolves once it answers. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/** Resolves once a PING on `port` gets +PONG (a two-minute ceiling for a loaded machine). */
async function answering(port: number): Promise<void> {
  const started = performance.now();
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = createConnection(port, '127.0.0.1');
      socket.setTimeout(2000, () => socket.destroy());
      socket.on('error', () => resolve(false)).on('close', () => resolve(false));
      socket.on('connect', () => socket.write('PING\r\n'));
      socket.on('data', (d) => {
        resolve(d.toString().startsWith('+PONG'));
        socket.destroy();
      });
    });
    if (ok) return;
    if (performance.now() - started > 120_000) throw new Error(`redis-server on ${port} did not answer`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Starts a redis-server on a free loopback port and waits until it answers. `args`: more
 * settings, e.g. `['--rename-command', 'SSUBSCRIBE', '']` for a server without sharded pub/sub
 * (the same "unknown command" answer as a Redis before 7).
 */
export async function startOwnRedis(args: string[] = []): Promise<OwnRedis> {
  const port = await freePort();
  let proc: ChildProcess | undefined;
  const start = async () => {
    proc = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...args], { stdio: 'ignore' });
    await answering(port);
  };
  const kill = async () => {
    const p = proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const gone = new Promise((resolve) => p.once('exit', resolve));
    p.kill('SIGKILL');
    await gone;
  };
  await start();
  return { port, kill, restart: start, stop: kill };
}
