/**
 * The gateway's crash drill, short (issue 41): bench/chaos/gateway-harness.ts, the harness of
 * `npm run chaos -- --gateway`, small enough for CI. 2 `idem gateway` processes on real
 * PostgreSQL through the fault proxy, in front of the Python upstream that fences on
 * `Idem-Fencing-Token`; random SIGKILLs with restart, a gateway frozen past its lease, store
 * connections cut. 0 double effects, 0 lost, every answer byte-identical to its replay.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { GATEWAY_DEFAULTS, runGatewayChaos } from '../bench/chaos/gateway-harness.js';
import { gatewayTable } from '../bench/chaos/report.js';
import { needs, serviceUrl } from './helpers/services.js';

describe('gateway crash drill (short run)', { skip: needs('DATABASE_URL') }, () => {
  it('2 gateways, random kills, a frozen gateway and cut store connections: 0 double effects, 0 lost, identical replays', { timeout: 300_000 }, async () => {
    const result = await runGatewayChaos({
      ...GATEWAY_DEFAULTS,
      databaseUrl: serviceUrl('DATABASE_URL')!,
      intents: 120,
      slowMs: 7000,
      concurrency: 8,
      // Denser faults than the long run, so a short run meets each of them.
      killEveryMs: 1200,
      pauseEveryMs: 4000,
      cutEveryMs: 400,
      horizonMs: 120_000,
    });
    const table = gatewayTable(result);
    console.log(table);
    assert.deepEqual(result.violations, [], `invariants violated:\n${table}`);
    assert.equal(result.doubleEffects, 0, 'one effect per key');
    assert.equal(result.lost, 0, 'every acknowledged intent has its effect');
    assert.equal(result.unanswered, 0, 'every intent answered');
    assert.equal(result.differing, 0, 'replays byte-identical');
    assert.ok(result.kills > 0, `gateways were killed:\n${table}`);
    assert.ok(result.freezes > 0, `a gateway was frozen:\n${table}`);
    assert.ok(result.connectionsCut.total > 0, `store connections were cut:\n${table}`);
  });
});
