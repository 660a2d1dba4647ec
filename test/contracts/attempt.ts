/**
 * The attempt contract (protocol.md K5, K10, K23; docs/architecture.md, "One attempt"): every
 * surface runs its work through the engine's attempt, so each case below ends the same way on
 * every surface and every store. A surface only names its own answer for each end.
 *
 * - a work that always throws: `maxAttempts: 3` means 3 runs, never more, then the permanent end;
 * - a deterministic idem refusal (an `IdempotencyError` that is not `retryable`): the same;
 * - a crash loop (workers that froze with the key, their leases run out unreleased): the
 *   takeovers count, and after 3 the work does not run again;
 * - a transient failure (the store unavailable, a connection reset, `transient: true`): never
 *   counts, the work runs on every attempt;
 * - a lost lease: the frozen worker's late outcome is fenced out and answered `lease-lost`; the
 *   worker that took over stores its own, which every retry gets.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { StoreUnavailableError, UnsupportedResponseError } from '../../src/core/errors.js';
import { IdempotentConsumer } from '../../src/consumer/index.js';
import { IdempotencyEngine } from '../../src/engine/engine.js';
import { idempotent } from '../../src/function/index.js';
import { HttpIdempotency } from '../../src/http/index.js';
import type { StoreFactory, StoreHarness } from '../helpers/stores.js';
import { useStoreBackend } from '../helpers/stores.js';

/** How one call ended, in the contract's words. */
export type End = 'ok' | 'replay' | 'failed' | 'permanent' | 'lease-lost' | 'unavailable';

/** The work of one attempt; `attempt` counts the runs of this key's work, from 1. */
export type Work = (attempt: number) => Promise<void>;

/** A surface under the contract: one call of one key with the work to run. */
export interface Surface {
  name: string;
  /** The (scope, key) the store holds for `key`. */
  scope: string;
  bind(engine: IdempotencyEngine<unknown>, maxAttempts: number): (key: string, work: () => Promise<void>) => Promise<End>;
}

const problemType = async (response: Response): Promise<string> => String(((await response.json()) as { type?: string }).type ?? '');

export const surfaces: Surface[] = [
  {
    name: 'HTTP (web core)',
    scope: 'contract-tenant',
    bind(engine, maxAttempts) {
      const http = new HttpIdempotency({ engine, maxAttempts, scope: () => 'contract-tenant', onHandlerError: () => undefined });
      return async (key, work) => {
        const request = new Request('http://idem.test/v1/charges', {
          method: 'POST',
          headers: { 'idempotency-key': key, 'content-type': 'application/json' },
          body: '{"amount":100}',
        });
        const response = await http.handle(request, async () => {
          await work();
          return new Response('charged', { status: 201 });
        });
        if (response.status === 201) return response.headers.get('idempotent-replayed') === 'true' ? 'replay' : 'ok';
        const type = await problemType(response);
        if (type.endsWith('request-failed-permanently')) return 'permanent';
        if (type.endsWith('request-failed-retry')) return 'failed';
        if (type.endsWith('idempotency-lease-lost')) return 'lease-lost';
        if (response.status === 503) return 'unavailable';
        throw new Error(`unexpected answer ${response.status} ${type}`);
      };
    },
  },
  {
    name: 'consumer (the store counts)',
    scope: 'contract-queue',
    bind(engine, maxAttempts) {
      const consumer = new IdempotentConsumer({ engine, scope: 'contract-queue', maxAttempts, retryDelayMs: 0 });
      return async (key, work) => {
        const d = await consumer.consume({ id: key, body: new TextEncoder().encode('{"order":1}') }, () => work());
        if (d.action === 'ack') return d.reason === 'duplicate' ? 'replay' : 'ok';
        if (d.action === 'dead-letter') return d.reason === 'max-attempts' ? 'permanent' : (assert.fail(`dead-lettered: ${d.reason}`) as never);
        if (d.reason === 'lease-lost') return 'lease-lost';
        if (d.reason === 'store-unavailable') return 'unavailable';
        return 'failed';
      };
    },
  },
  {
    name: 'consumer (the broker counts deliveries)',
    scope: 'contract-broker',
    bind(engine, maxAttempts) {
      const consumer = new IdempotentConsumer({ engine, scope: 'contract-broker', maxAttempts, retryDelayMs: 0 });
      const deliveries = new Map<string, number>();
      return async (key, work) => {
        const attempt = (deliveries.get(key) ?? 0) + 1;
        deliveries.set(key, attempt);
        const d = await consumer.consume({ id: key, body: new TextEncoder().encode('{"order":1}'), attempt }, () => work());
        if (d.action === 'ack') return d.reason === 'duplicate' ? 'replay' : 'ok';
        if (d.action === 'dead-letter') return d.reason === 'max-attempts' ? 'permanent' : (assert.fail(`dead-lettered: ${d.reason}`) as never);
        if (d.reason === 'lease-lost') return 'lease-lost';
        if (d.reason === 'store-unavailable') return 'unavailable';
        return 'failed';
      };
    },
  },
  {
    name: 'idempotent(fn)',
    scope: 'contract-fn',
    bind(engine, maxAttempts) {
      let current: () => Promise<void> = async () => undefined;
      const charge = idempotent(
        async (_ctx, _order: { amount: number }) => {
          await current();
          return { charged: true };
        },
        { engine, name: 'contract-fn', maxAttempts },
      );
      return async (key, work) => {
        current = work;
        try {
          const outcome = await charge.outcome({ key }, { amount: 100 });
          return outcome.replayed ? 'replay' : 'ok';
        } catch (error) {
          const code = (error as { code?: string }).code;
          if (code === 'IDEM_STORED_FAILURE' && /IDEM_FAILED_PERMANENTLY|failed \d+ times/.test(String((error as Error).message))) return 'permanent';
          if (code === 'IDEM_LEASE_LOST') return 'lease-lost';
          if (code === 'IDEM_STORE_UNAVAILABLE' || code === 'IDEM_STORE_TIMEOUT') return 'unavailable';
          return 'failed';
        }
      };
    },
  },
];

/** A promise and its resolver: a frozen worker waits on it; the test wakes it when done. */
function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** The attempt contract over `surfaces` on one store. */
export function attemptContract(factory: StoreFactory): void {
  const { backend, cleanup } = useStoreBackend(factory);

  async function setup(): Promise<{ harness: StoreHarness; engine: IdempotencyEngine<unknown> }> {
    const harness = await backend().fresh();
    cleanup(() => harness.drop());
    // No heartbeat: a frozen worker's lease runs out when the test ends it, and nothing else moves it.
    const engine = new IdempotencyEngine<unknown>({ store: harness.store, leaseMs: 60_000, heartbeatMs: 0 });
    return { harness, engine };
  }

  for (const surface of surfaces) {
    describe(surface.name, () => {
      it('a work that always throws: maxAttempts 3 means 3 runs, then the permanent end on every later call', async () => {
        const { engine } = await setup();
        const call = surface.bind(engine, 3);
        let runs = 0;
        const ends: End[] = [];
        for (let i = 0; i < 6; i++) {
          ends.push(
            await call('always-throws', async () => {
              runs++;
              throw new Error('the receipt renderer crashed');
            }),
          );
        }
        assert.equal(runs, 3, 'the work ran 3 times, never more');
        assert.deepEqual(ends, ['failed', 'failed', 'permanent', 'permanent', 'permanent', 'permanent']);
      });

      it('a deterministic idem refusal (not retryable) counts like any failure: 3 runs, then the permanent end', async () => {
        const { engine } = await setup();
        const call = surface.bind(engine, 3);
        let runs = 0;
        const ends: End[] = [];
        for (let i = 0; i < 6; i++) {
          ends.push(
            await call('refused', async () => {
              runs++;
              throw new UnsupportedResponseError('idem cannot record this answer');
            }),
          );
        }
        assert.equal(runs, 3);
        assert.deepEqual(ends.slice(2), ['permanent', 'permanent', 'permanent', 'permanent']);
      });

      it('a crash loop: three workers froze with the key and their leases ran out; the fourth call does not run the work', async () => {
        const { harness, engine } = await setup();
        const call = surface.bind(engine, 3);
        const frozen: Array<{ open(): void; done: Promise<End> }> = [];
        let runs = 0;
        for (let i = 0; i < 3; i++) {
          const started = gate();
          const wake = gate();
          const done = call('crash-loop', async () => {
            runs++;
            started.open();
            await wake.promise; // frozen: never releases the key
            throw new Error('the process died');
          });
          await started.promise;
          await harness.setLease(surface.scope, 'crash-loop', -1_000); // its lease ran out unreleased
          frozen.push({ open: wake.open, done });
        }
        const fourth = await call('crash-loop', async () => {
          runs++;
        });
        assert.equal(fourth, 'permanent');
        assert.equal(runs, 3, 'the work did not run on the fourth call');
        for (const worker of frozen) worker.open();
        for (const worker of frozen) assert.equal(await worker.done, 'lease-lost', 'a frozen worker that wakes is fenced out');
        assert.equal(await call('crash-loop', async () => void runs++), 'permanent');
        assert.equal(runs, 3);
      });

      it('a transient failure never counts: the store unavailable, a connection reset, an error marked transient', async () => {
        const { engine } = await setup();
        const call = surface.bind(engine, 3);
        let runs = 0;
        const transient = [
          () => new StoreUnavailableError('idem/postgres: the pool is exhausted'),
          () => Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
          () => Object.assign(new Error('the payment provider is down'), { transient: true }),
        ];
        const ends: End[] = [];
        for (let i = 0; i < 6; i++) {
          ends.push(
            await call('transient', async () => {
              runs++;
              throw transient[i % 3]!();
            }),
          );
        }
        assert.equal(runs, 6, 'every attempt ran: none of these failures counted');
        assert.ok(!ends.includes('permanent'), `never ended for good: ${ends.join(', ')}`);
        assert.equal(await call('transient', async () => void runs++), 'ok', 'the next attempt that succeeds is stored');
        assert.equal(await call('transient', async () => void runs++), 'replay');
        assert.equal(runs, 7);
      });

      it('a lost lease: the frozen worker is fenced out and answered lease-lost; the takeover stores its own outcome', async () => {
        const { harness, engine } = await setup();
        const call = surface.bind(engine, 3);
        const started = gate();
        const wake = gate();
        let runs = 0;
        const first = call('lease-lost', async () => {
          runs++;
          started.open();
          await wake.promise;
        });
        await started.promise;
        await harness.setLease(surface.scope, 'lease-lost', -1_000);
        assert.equal(await call('lease-lost', async () => void runs++), 'ok', 'the takeover runs and stores');
        wake.open();
        assert.equal(await first, 'lease-lost');
        assert.equal(await call('lease-lost', async () => void runs++), 'replay');
        assert.equal(runs, 2);
      });
    });
  }
}
