/**
 * The chaos history checker (bench/chaos/history.ts, issue 44) on small synthetic histories:
 * a clean one passes, and each history that breaks one invariant is named by that invariant
 * alone. Also the JSONL round trip and the `--check <file>` entry a failed run's history is replayed with.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { check, hashBytes, History, INVARIANTS, loadHistory, type Invariant, type Op } from '../bench/chaos/history.js';

const body = (key: string) => new TextEncoder().encode(JSON.stringify({ id: `ch_${key}`, customer: `cus_${key}` }));

/** Two keys, each sent twice and answered identically, one effect per ledger, the stored row equal, one mismatch probe answered 422. */
function clean(): History {
  const h = new History({ harness: 'synthetic', ledgers: ['psp', 'local'], livenessBoundMs: 10_000 });
  for (const key of ['a', 'b']) {
    for (let copy = 0; copy < 2; copy++) h.op(ok(key, 1000 + copy, 1500 + copy));
    h.effect('psp', key, 1);
    h.effect('local', key, 1);
    h.stored(key, body(key));
  }
  h.op({ ...ok('a', 2000, 2100), mismatch: true, outcome: { type: 'fail', status: 422, hash: hashBytes('{"type":"mismatch"}') } });
  return h;
}

function ok(key: string, invokeMs: number, completeMs: number): Omit<Op, 'kind'> {
  return {
    key,
    scope: 'tenant-1',
    requestHash: hashBytes(`req-${key}`),
    invokeMs,
    completeMs,
    attempts: 1,
    expectId: `cus_${key}`,
    outcome: { type: 'ok', status: 201, hash: hashBytes(body(key)), bodyId: `cus_${key}` },
  };
}

/** Asserts that exactly `inv` is violated. */
function violatesOnly(h: History, inv: Invariant): void {
  const v = h.check();
  assert.equal(v.ok, false, `${inv} must be violated`);
  for (const other of INVARIANTS) assert.equal(v.counts[other] > 0, other === inv, `${other}: ${v.violations.join(' | ')}`);
  assert.ok(
    v.violations.every((l) => l.startsWith(`${inv}: `)),
    v.violations.join(' | '),
  );
}

describe('chaos history checker', () => {
  it('passes a clean history and reports p50 / p99 time to the final answer', () => {
    const v = clean().check();
    assert.deepEqual(v.violations, []);
    assert.equal(v.ok, true);
    assert.equal(v.ops, 5);
    assert.equal(v.keys, 2);
    assert.equal(v.p50Ms, 500);
  });

  it('at-most-one-effect: a key with two PSP charges', () => {
    const h = clean();
    h.effect('psp', 'b', 1); // a second charge row for b
    violatesOnly(h, 'at-most-one-effect');
  });

  it('identical-ok: two ok answers for one key that differ', () => {
    const h = clean();
    h.op({ ...ok('a', 3000, 3100), outcome: { type: 'ok', status: 201, hash: hashBytes('other bytes'), bodyId: 'cus_a' } });
    violatesOnly(h, 'identical-ok');
  });

  it('identical-ok: the ok answer differs from the stored response', () => {
    const h = clean();
    h.stored('b', new TextEncoder().encode('what the row holds instead'));
    violatesOnly(h, 'identical-ok');
  });

  it('ok-has-effect: an acknowledged key with no effect in one ledger', () => {
    const h = new History({ harness: 'synthetic', ledgers: ['psp', 'local'], livenessBoundMs: 10_000 });
    h.op(ok('a', 0, 10));
    h.effect('psp', 'a', 1);
    violatesOnly(h, 'ok-has-effect');
  });

  it("own-body: an answer that embeds another intent's id", () => {
    const h = clean();
    h.op({ ...ok('c', 0, 10), outcome: { type: 'ok', status: 201, hash: hashBytes('c-bytes'), bodyId: 'cus_a' } });
    h.effect('psp', 'c', 1);
    h.effect('local', 'c', 1);
    violatesOnly(h, 'own-body');
  });

  it("own-body: an answer that is another key's exact body", () => {
    const h = clean();
    h.op({ ...ok('c', 0, 10), expectId: undefined, outcome: { type: 'ok', status: 201, hash: hashBytes(body('b')) } });
    h.effect('psp', 'c', 1);
    h.effect('local', 'c', 1);
    violatesOnly(h, 'own-body');
  });

  it('mismatch-no-replay: a mismatched request answered with the stored body', () => {
    const h = clean();
    h.op({ ...ok('b', 2000, 2100), mismatch: true });
    violatesOnly(h, 'mismatch-no-replay');
  });

  it('liveness: an operation with no final answer, and one answered after the bound', () => {
    const h = clean();
    h.op({ key: 'a', scope: 'tenant-1', requestHash: hashBytes('req-a'), invokeMs: 0, attempts: 40, outcome: { type: 'unknown', reason: '503@119000' } });
    h.op({ ...ok('b', 0, 10_001) });
    violatesOnly(h, 'liveness');
    assert.equal(h.check().counts.liveness, 2);
  });

  it('a failed history round-trips through JSONL, and --check replays it (exit 1, the invariant named)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'idem-history-'));
    try {
      const h = clean();
      h.effect('local', 'a', 1);
      const file = h.save(join(dir, 'run.jsonl'));
      assert.deepEqual(check(loadHistory(file)), h.check());
      let out = '';
      let status = 0;
      try {
        execFileSync(process.execPath, ['--import', 'tsx', 'bench/chaos/history.ts', '--check', file], { encoding: 'utf8' });
      } catch (error) {
        const e = error as { status: number; stdout: string };
        status = e.status;
        out = e.stdout;
      }
      assert.equal(status, 1);
      assert.match(out, /VIOLATED at-most-one-effect: a: 2 effects in local/);
      const cleanFile = clean().save(join(dir, 'clean.jsonl'));
      assert.match(
        execFileSync(process.execPath, ['--import', 'tsx', 'bench/chaos/history.ts', '--check', cleanFile], { encoding: 'utf8' }),
        /every invariant held/,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
