/**
 * The gateway tests' pieces: the Python upstream (test/gateway/upstream.py, its own sqlite
 * database of effects), a gateway in this process on a given store, and requests through it.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import { createGateway, type Gateway } from '../../src/gateway/index.js';
import type { IdempotencyStore } from '../../src/store/types.js';
import type { GatewayStore } from './gateway-stores.js';
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
  state(): Promise<{ effects: Effect[]; seen: Array<{ path: string; headers: Record<string, string> }>; inflight: number }>;
  /** Resolves once the upstream has answered every request it took (a held one, woken, included). */
  settled(): Promise<void>;
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
  const state = async () => (await (await fetch(`${url}/control/effects`)).json()) as Awaited<ReturnType<PythonUpstream['state']>>;
  return {
    url,
    state,
    async settled() {
      while ((await state()).inflight > 0) await new Promise((resolve) => setTimeout(resolve, 50));
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

/** What a suite's hooks set up: read its fields inside tests. */
export interface GatewaySuite {
  upstream: PythonUpstream;
  gateway: Gateway;
  url: string;
  /** The upstream's effects and seen requests for one key. */
  effectsOf(key: string): Promise<Effect[]>;
  seenOf(key: string): Promise<Array<{ path: string; headers: Record<string, string> }>>;
}

/**
 * Registers the suite's hooks: a Python upstream, the store, and a gateway on `config` (given the
 * upstream's URL as `upstream`); all stopped after the suite (held requests released first).
 */
export function gatewaySuite(backend: GatewayStore, config: Record<string, unknown>): GatewaySuite {
  const suite = {} as GatewaySuite;
  let close: () => Promise<void>;
  before(async () => {
    suite.upstream = await startPythonUpstream();
    const opened = await backend.open();
    close = opened.close;
    const started = await startGateway(opened.store, { upstream: suite.upstream.url, ...config });
    suite.gateway = started.gateway;
    suite.url = started.url;
  });
  after(async () => {
    await suite.upstream.release();
    await suite.gateway.close();
    await close();
    await suite.upstream.stop();
  });
  suite.effectsOf = async (key) => (await suite.upstream.state()).effects.filter((e) => e.key === key);
  suite.seenOf = async (key) => (await suite.upstream.state()).seen.filter((s) => s.headers['idempotency-key'] === key);
  return suite;
}
