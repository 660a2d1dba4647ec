/**
 * The gateway tests' pieces: the Python upstream (test/gateway/upstream.py, its own sqlite
 * database of effects), a gateway in this process on a given store, and requests through it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createGateway, type Gateway } from '../../src/gateway/index.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import { CHILD_READY_TIMEOUT_MS, ROOT } from './process.js';

/** One effect the upstream applied. */
export interface Effect {
  scope: string;
  key: string;
  token: number;
  attempt: number;
  body: string;
}

/** The running Python upstream. */
export interface PythonUpstream {
  url: string;
  /** Every effect applied, and the headers of every request it saw (lower-case names). */
  state(): Promise<{ effects: Effect[]; seen: Array<{ path: string; headers: Record<string, string> }> }>;
  /** Wakes held requests (mode=hold) and lets later ones through. */
  release(): Promise<void>;
  /** Makes mode=hold hold again. */
  arm(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts the upstream on a free port with a fresh database; resolves once it accepts connections. */
export async function startPythonUpstream(): Promise<PythonUpstream> {
  const dir = mkdtempSync(join(tmpdir(), 'idem-gw-upstream-'));
  const child: ChildProcess = spawn('python3', [join(ROOT, 'test/gateway/upstream.py'), join(dir, 'effects.db')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`upstream.py printed no port:\n${output}`)), CHILD_READY_TIMEOUT_MS);
    const onData = (d: Buffer) => {
      output += d.toString();
      const match = /listening (\d+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`upstream.py exited ${code}:\n${output}`)));
  });
  const url = `http://127.0.0.1:${port}`;
  const post = async (path: string) => {
    const res = await fetch(url + path, { method: 'POST' });
    await res.arrayBuffer();
  };
  return {
    url,
    async state() {
      return (await (await fetch(`${url}/control/effects`)).json()) as Awaited<ReturnType<PythonUpstream['state']>>;
    },
    release: () => post('/control/release'),
    arm: () => post('/control/arm'),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const gone = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A gateway in this process, listening on a free port. */
export async function startGateway(store: IdempotencyStore, config: Record<string, unknown>): Promise<{ gateway: Gateway; url: string }> {
  const gateway = createGateway({ store, config: { listen: '127.0.0.1:0', ...config } });
  return { gateway, url: await gateway.listen() };
}

/** A POST through the gateway: status, headers and exact body bytes. */
export async function post(
  url: string,
  headers: Record<string, string>,
  body: string,
): Promise<{ status: number; headers: Headers; bytes: Buffer; json: () => Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { status: res.status, headers: res.headers, bytes, json: () => JSON.parse(bytes.toString()) as Record<string, unknown> };
}

/**
 * Sends the request again until the answer is not 409 "in progress" (the key's lease ran out):
 * the wait is on the gateway's answer, not on a clock.
 */
export async function retryUntilTakenOver(url: string, headers: Record<string, string>, body: string): Promise<Awaited<ReturnType<typeof post>>> {
  for (;;) {
    const answer = await post(url, headers, body);
    if (answer.status !== 409 || answer.json().type !== 'urn:idem:problem:request-in-progress') return answer;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
