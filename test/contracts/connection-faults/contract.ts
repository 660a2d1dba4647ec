/**
 * The connection-fault contract (issue 24): every fault of ./faults.ts over every client of
 * ./entries.ts, against the service of ./app.ts running as a child process (a fresh one per
 * fault) behind one fault proxy per server. For each fault it checks that
 * - the process never exits (every step races the child's exit, which fails the test with its output);
 * - each request that meets the fault gets 503 with `Retry-After` within `storeTimeoutMs` + 1 s
 *   (or idem's retryable 500 problem, where a phase's transaction broke), plus the machine's own
 *   delay at that moment: the round trips of a `GET /ping` that touches no store, sent as the
 *   request leaves and as its answer arrives (a few ms on an idle machine, seconds on one
 *   loaded far beyond its cores);
 * - once the server is back the service recovers with no restart: under steady traffic (201
 *   within {@link RECOVER_MS}, then {@link STEADY} in a row) and after an idle spell longer
 *   than the client's timers (the first request after it answers 201).
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { spawnTs, stopChild, type Child } from '../../helpers/process.js';
import { startSilentProxy, type SilentProxy } from '../../helpers/silent-proxy.js';
import { PROBLEM, requestInit } from '../../helpers/http.js';
import { sleep } from '../../helpers/wait.js';
import type { FaultEntry } from './entry.js';
import { faults, type FaultScene } from './faults.js';

/** The store's deadline in the service: every 503 must come within it + 1 s. */
export const STORE_TIMEOUT_MS = 1000;
/** How long the service may take to answer 201 again once the server is back. */
export const RECOVER_MS = Number(process.env.FAULT_RECOVER_MS ?? 15_000);
/** Requests in a row that must answer 201 once recovered. */
export const STEADY = 5;
const APP = 'test/contracts/connection-faults/app.ts';

/** What the contract measured for one fault, printed as a diagnostic. */
interface Recovery {
  failedBeforeRecovery: number;
  recoverMs: number;
}

/**
 * Clients run at once: each has its own proxies, service process and database, and a fault's
 * test mostly waits (for deadlines, leases, idle spells), so a few side by side cost little CPU
 * and cut the file's wall time (about 460 s one client at a time, 12 clients).
 */
export const ENTRIES_AT_ONCE = 3;

/**
 * Runs the contract on each entry: one `describe` per client ({@link ENTRIES_AT_ONCE} clients
 * at once), one test per fault in turn, each on a fresh service process.
 */
export function connectionFaultContract(entries: FaultEntry[]): void {
  describe('connection faults', { concurrency: ENTRIES_AT_ONCE }, () => {
    for (const entry of entries) connectionFaultsOf(entry);
  });
}

function connectionFaultsOf(entry: FaultEntry): void {
  const skip = process.env[entry.needs] ? false : `needs ${entry.needs}`;
  // concurrency 1: a client's faults share its service process, one after another.
  describe(`connection faults: ${entry.name}`, { skip, concurrency: 1 }, () => {
    const name = `idem_faults_${randomUUID().slice(0, 8)}`;
    const proxies: SilentProxy[] = [];
    let child: Child;
    let url = '';

    /** `work`, or a failure naming the child's output as soon as the child exits. */
    const exitError = (exit: { code: number | null; signal: string | null }) =>
      new Error(`the service exited (code ${exit.code}, signal ${exit.signal}):\n${child.output()}`);
    const alive = async <T>(work: Promise<T>): Promise<T> => {
      const died = child.exited.then((exit) => {
        throw exitError(exit);
      });
      died.catch(() => undefined);
      try {
        return await Promise.race([work, died]);
      } catch (error) {
        // A request cut short by the service dying fails before the exit is seen: name the exit.
        const exit = await Promise.race([child.exited, sleep(2000).then(() => undefined)]);
        throw exit ? exitError(exit) : error;
      }
    };
    /** A `GET /ping`'s round trip in ms: the service's and this process's own delay right now. */
    const ping = async (): Promise<number> => {
      const started = performance.now();
      await (await fetch(`${url}/ping`, { signal: AbortSignal.timeout(RECOVER_MS) })).text();
      return performance.now() - started;
    };
    type Answer = { status: number; retryAfter: string | null; type?: string; ms: number; machineMs: number };
    const send = async (path = '/charge'): Promise<Answer> => {
      const started = performance.now();
      const pingOut = ping();
      const res = await fetch(`${url}${path}`, { ...requestInit({ key: randomUUID(), json: { amount: 1 } }), signal: AbortSignal.timeout(RECOVER_MS) });
      const text = await res.text();
      const ms = performance.now() - started;
      const type = res.headers.get('content-type') === 'application/problem+json' ? (JSON.parse(text) as { type?: string }).type : undefined;
      const machineMs = (await pingOut) + (await ping());
      return { status: res.status, retryAfter: res.headers.get('retry-after'), type, ms, machineMs };
    };
    const assertInTime = (r: Answer, what: string) =>
      assert.ok(
        r.ms <= STORE_TIMEOUT_MS + 1000 + r.machineMs,
        `${what}: answered after ${Math.round(r.ms)} ms, over storeTimeoutMs + 1 s + the machine's delay (${Math.round(r.machineMs)} ms)`,
      );
    const assertOn503 = (r: Answer, what: string, also500 = false) => {
      if (also500 && r.status === 500) assert.equal(r.type, `${PROBLEM}request-failed-retry`, `${what}: a 500 must be the retryable problem`);
      else {
        assert.equal(r.status, 503, `${what}: status`);
        assert.ok(r.retryAfter, `${what}: Retry-After`);
      }
      assertInTime(r, what);
    };
    const start503 = async (what: string, path?: string, also500 = false) => assertOn503(await alive(send(path)), what, also500);
    /** The request in flight at a cut, on a client that resends it (`resendsCut`): 201, or the answer of {@link start503}. */
    const resent = async (what: string, path?: string, also500 = false) => {
      const r = await alive(send(path));
      if (r.status !== 201) return assertOn503(r, what, also500);
      assertInTime(r, what);
    };
    const scene: FaultScene = {
      proxies,
      start503: entry.resendsCut ? resent : start503,
      expect503: async (what, count = 1) => void (await Promise.all(Array.from({ length: count }, (_, i) => start503(`${what} (${i + 1})`)))),
      idle: (ms) => alive(sleep(ms)),
      line: async (pattern) => void (await alive(child.waitFor(pattern, RECOVER_MS))),
      idleMs: entry.idleMs,
    };

    /** Sends until a 201, then {@link STEADY} more that must all be 201. */
    async function recovers(): Promise<Recovery> {
      const started = performance.now();
      let failed = 0;
      for (;;) {
        const r = await alive(send());
        if (r.status === 201) break;
        failed++;
        assert.ok(performance.now() - started < RECOVER_MS, `no 201 within ${RECOVER_MS} ms of the server being back (${failed} answers of ${r.status} …)`);
      }
      const recoverMs = Math.round(performance.now() - started);
      for (let i = 0; i < STEADY; i++) assert.equal((await alive(send())).status, 201, `steady request ${i + 1} after recovery`);
      return { failedBeforeRecovery: failed, recoverMs };
    }

    let via: Record<string, number> = {};
    before(async () => {
      via = {};
      for (const server of await entry.servers()) {
        const proxy = await startSilentProxy(server);
        proxies.push(proxy);
        via[`${server.host}:${server.port}`] = proxy.port;
      }
    });
    /** A fresh service per fault, warmed up, so one fault's damage never shows in the next. */
    beforeEach(async () => {
      for (const proxy of proxies) proxy.mode('forward');
      child = spawnTs(APP, {
        FAULT_CLIENT: entry.name,
        FAULT_VIA: JSON.stringify(via),
        FAULT_NAME: name,
        FAULT_STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS),
      });
      const match = await child.waitFor(/listening (\d+)/);
      url = `http://127.0.0.1:${match[1]}`;
      assert.equal((await alive(send())).status, 201, 'warm-up');
    });
    afterEach(async () => {
      if (child) await stopChild(child);
    });
    after(async () => {
      for (const proxy of proxies) await proxy.close();
      await entry.cleanup(name).catch(() => undefined);
    });

    for (const fault of faults) {
      it(`${fault.name}: the process lives, 503 + Retry-After within storeTimeoutMs + 1 s, recovers under traffic and after idleness`, {
        timeout: 120_000,
        todo: entry.knownFailures?.[fault.name],
      }, async (t) => {
        await fault.run(scene);
        const traffic = await recovers();
        await scene.idle(entry.idleMs);
        const afterIdle = await alive(send());
        assert.equal(afterIdle.status, 201, 'the first request after an idle spell once the server is back');
        t.diagnostic(`503s before recovery: ${traffic.failedBeforeRecovery}, recovered in ${traffic.recoverMs} ms`);
      });
    }
  });
}
