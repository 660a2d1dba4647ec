/**
 * The events the engine reports (onEvent) over every suite store.
 * The frame (stores, fresh store per test, clock) is test/helpers/engine-suite.ts.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { engineSuite, SCOPE, OTHER_FP, SHORT_LEASE_MS, response, executionOf } from './helpers/engine-suite.js';
import type { IdempotencyEvent } from '../src/engine/execution.js';
import { LeaseLostError } from '../src/core/errors.js';

engineSuite((s) => {
  const { makeEngine, begin, takeOver } = s;
  describe('events', () => {
    it('reports claimed, in-progress, mismatch, phases, release, taken-over, skip, finished and replayed', async () => {
      const events: IdempotencyEvent[] = [];
      const engine = makeEngine({ onEvent: (e) => events.push(e) });
      const x = executionOf(await begin(engine));
      await begin(engine);
      await begin(engine, 'k', OTHER_FP);
      await x.phase('a', async () => 1);
      await x.release();
      const y = executionOf(await begin(engine));
      await y.phase('a', async () => 2);
      await y.finish(response(200));
      await begin(engine);

      assert.ok(y.token > x.token, `takeover token ${y.token} must exceed ${x.token}`);
      assert.deepEqual(
        events.map((e) => [e.type, e.token, e.phase]),
        [
          ['claimed', x.token, undefined],
          ['in-progress', undefined, undefined],
          ['mismatch', undefined, undefined],
          ['phase-committed', x.token, 'a'],
          ['released', x.token, undefined],
          ['taken-over', y.token, undefined],
          ['phase-skipped', y.token, 'a'],
          ['finished', y.token, undefined],
          ['replayed', undefined, undefined],
        ],
      );
      assert.ok(
        events.every((e) => e.scope === SCOPE && e.key === 'k'),
        'every event names the scope and key',
      );
    });

    it('reports discarded and lease-lost', async () => {
      const events: IdempotencyEvent[] = [];
      const engine = makeEngine({ leaseMs: SHORT_LEASE_MS, heartbeatMs: 0, onEvent: (e) => events.push(e) });
      const x = executionOf(await begin(engine, 'd'));
      await x.discard();
      const stale = executionOf(await begin(engine, 'l'));
      await takeOver(engine, 'l');
      await assert.rejects(
        stale.phase('a', async () => 1),
        LeaseLostError,
      );
      const types = events.map((e) => e.type).filter((t) => t !== 'in-progress');
      assert.deepEqual(types, ['claimed', 'discarded', 'claimed', 'taken-over', 'lease-lost']);
    });

    it('ignores an observer that throws', async () => {
      const engine = makeEngine({
        onEvent: () => {
          throw new Error('observer failed');
        },
      });
      const x = executionOf(await begin(engine));
      assert.equal(await x.phase('a', async () => 1), 1);
      await x.finish(response(200));
      assert.equal((await begin(engine)).kind, 'replay');
    });
  });
});
