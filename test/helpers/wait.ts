/**
 * Waiting in tests, written once: sleep, polling until a condition holds, and a virtual clock
 * for the fast tier. Waits on servers and child processes are in ./process.ts (a readiness line
 * or an exit, with a generous ceiling).
 */
import assert from 'node:assert/strict';
import { mock } from 'node:test';

/** Resolves after `ms` ms of real time. */
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A source of time for a suite: real (timers and `Date` as they are) or virtual (node:test mock
 * timers: `sleep` advances the mocked `setTimeout`, `setInterval` and `Date` at once, so a lease
 * of seconds runs out in microseconds). Virtual time needs a store whose clock is `Date.now()`
 * (the memory store of test/helpers/stores.ts).
 */
export interface TestTime {
  readonly virtual: boolean;
  /** Lets `ms` ms pass. */
  sleep(ms: number): Promise<void>;
  /** Called in `beforeEach` / `afterEach` of each test. */
  start(): void;
  stop(): void;
}

export const realTime: TestTime = { virtual: false, sleep, start: () => undefined, stop: () => undefined };

/** Mocked `setTimeout`, `setInterval` and `Date`; `sleep` ticks them in 10 ms steps, letting promises settle between steps. */
export const virtualTime: TestTime = {
  virtual: true,
  async sleep(ms) {
    // Promises (store calls, heartbeats) settle in the microtask queue; setImmediate (not mocked)
    // runs after it has drained, so each step sees every reaction to the timers it fired.
    for (let left = ms; left > 0; left -= 10) {
      mock.timers.tick(Math.min(10, left));
      await new Promise((resolve) => setImmediate(resolve));
    }
    await new Promise((resolve) => setImmediate(resolve));
  },
  start: () => {
    mock.timers.enable({ apis: ['setTimeout', 'setInterval', 'Date'], now: Date.now() });
    followDate();
  },
  stop: () => {
    mock.timers.reset();
    mock.restoreAll();
  },
};

/**
 * The engine measures its own intervals (the heartbeat's budget) on `performance.now()`, which
 * node:test's mock timers leave alone: under virtual time it follows the mocked `Date`.
 */
function followDate(): void {
  const offset = performance.now() - Date.now();
  mock.method(performance, 'now', () => Date.now() + offset);
}

/**
 * Mocked `Date` only, for suites over real sockets (HTTP servers keep their real timers):
 * `sleep` moves the clock of a store on `Date.now()` at once, without waiting.
 */
export const virtualDate: TestTime = {
  virtual: true,
  async sleep(ms) {
    mock.timers.tick(ms);
    await new Promise((resolve) => setImmediate(resolve));
  },
  start: () => mock.timers.enable({ apis: ['Date'], now: Date.now() }),
  stop: () => mock.timers.reset(),
};

/**
 * Calls `probe` every `everyMs` ms until `done` holds for its result, or fails after
 * `timeoutMs` (on `time`'s clock), naming the last value.
 */
export async function eventually<T>(
  probe: () => Promise<T>,
  done: (value: T) => boolean,
  options: { timeoutMs?: number; everyMs?: number; time?: TestTime } = {},
): Promise<T> {
  const { timeoutMs = 3000, everyMs = 20, time = realTime } = options;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) assert.fail(`condition not reached within ${timeoutMs} ms; last value ${JSON.stringify(value)}`);
    await time.sleep(everyMs);
  }
}

/** Polls `check` every `everyMs` ms until it returns a value other than `undefined`; fails after `timeoutMs`, naming `what`. */
export async function poll<T>(check: () => Promise<T | undefined> | T | undefined, timeoutMs: number, what: string, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(everyMs);
  }
}

/**
 * The response, with how long it took, or a failure once `ms` have passed: a hung request must
 * fail the test, not the run.
 */
export async function within(response: Promise<Response>, ms: number, what: string): Promise<{ res: Response; ms: number }> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
  });
  try {
    const res = await Promise.race([response, hung]);
    return { res, ms: performance.now() - started };
  } finally {
    clearTimeout(timer);
  }
}
