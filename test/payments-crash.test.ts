/**
 * End to end, the example payments API (examples/payments): crashes at every point of a charge and a frozen stale worker (scenarios 7-9, 12).
 *
 * The real server runs as child processes (`node --import tsx examples/payments/server.ts`),
 * driven over real TCP connections, on embedded PGlite always and on PostgreSQL when
 * DATABASE_URL is set; see test/helpers/payments/ (suite.ts for the frame, databases.ts for the
 * backends). Tests isolate themselves by unique API keys, idempotency keys and customers, and
 * count PSP charges per customer through `GET /v1/psp/charges`. PGlite admits one process per
 * data directory, so there the local `charges` table is read directly only while no server has
 * the directory open, and two servers at once run on PostgreSQL only.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { deriveKey } from '../src/core/derived-key.js';
import {
  rand,
  until,
  settle,
  postCharge,
  pspCharges,
  assertLocalCharge,
  PROBLEM,
  assertProblem,
  assertFresh,
  assertReplayOf,
  retryUntilCreated,
  assertInProgress,
} from './helpers/payments/api.js';
import { localRows } from './helpers/payments/databases.js';
import { sleep } from './helpers/wait.js';
import type { Server } from './helpers/payments/servers.js';
import { paymentsSuite, T } from './helpers/payments/suite.js';

paymentsSuite(
  'example payments API, end to end: crash',
  ({ backend, start }) => {
    /**
     * Crash scenarios: server A SIGKILLs itself at `point`; server B (same database, no crash
     * env) takes over once the lease has run out. On PostgreSQL B runs from the start (another
     * host); on PGlite B is a restart that reopens A's directory after A died.
     */
    async function crashScenario(point: 'after_charge_created' | 'psp_unrecorded' | 'after_psp' | 'in_finish') {
      const db = backend.database();
      const leaseMs = 1500;
      const env = { IDEM_LEASE_MS: String(leaseMs) };
      const [a, bEarly] = await Promise.all([
        start(db, { ...env, PAYMENTS_CRASH_AT: point }),
        backend.multiProcess ? start(db, env) : Promise.resolve(undefined),
      ]);
      const apiKey = `sk_test_${rand()}`;
      const key = `crash-${point}-${rand()}`;
      const customer = `cus_crash_${rand()}`;
      const body = { amount: 2500, currency: 'usd', customer, metadata: { point } };

      await assert.rejects(postCharge(a, { apiKey, key, body }), (error: NodeJS.ErrnoException) => {
        assert.ok(['ECONNRESET', 'EPIPE'].includes(error.code ?? ''), `expected a connection reset, got ${error.code} ${error.message}`);
        return true;
      });
      assert.deepEqual(await a.exited, { code: null, signal: 'SIGKILL' }, `the server killed itself at ${point}`);

      const before = await db.inspect({
        rows: localRows(customer),
        psp: { sql: `SELECT id, idempotency_key FROM psp_charges WHERE customer = $1`, params: [customer] },
        key: {
          sql: `SELECT state, recovery_point, phase_results ? 'psp_charged' AS psp_recorded, claim_id::text AS claim_id,
            GREATEST(0, EXTRACT(EPOCH FROM (locked_until - now())) * 1000)::float8 AS lease_left_ms
          FROM idempotency_keys WHERE key = $1`,
          params: [key],
        },
      });
      const inspectedAt = Date.now();
      assert.equal(before.rows.length, 1, 'phase 1 (charge_created) committed before the crash');
      assert.equal(before.rows[0]!.status, 'pending', 'the charge was not finished before the crash');
      assert.equal(before.key.length, 1);
      assert.equal(before.key[0]!.state, 'started', 'no response was stored before the crash');

      const b = bEarly ?? (await start(db, env));
      let first: { receivedAt: number; status: number } | undefined;
      const { res } = await retryUntilCreated(
        async () => {
          const res = await postCharge(b, { apiKey, key, body });
          first ??= { receivedAt: Date.now(), status: res.status };
          return res;
        },
        (res, attempt) => assertInProgress(res, `retry ${attempt} (until the crashed worker's lease runs out):`),
        60,
        20_000,
      );
      // The crashed worker's lease (1500 ms, renewed by its heartbeat) was still valid when the
      // key was inspected after the crash, by lease_left_ms on the database clock. A retry
      // answered before that lease ran out (200 ms margin for the inspect's return trip) was
      // claimed while it was valid, so it must have been refused with 409, not taken over.
      // Measured from the database rather than assumed, so a slow machine cannot fake a failure.
      const leaseLeftMs = Number(before.key[0]!.lease_left_ms);
      if (first!.receivedAt - inspectedAt < leaseLeftMs - 200) {
        assert.equal(first!.status, 409, `a retry answered within the crashed worker's lease (${leaseLeftMs} ms left) gets 409`);
      }
      const charge = assertFresh(res, 'the takeover:');
      assert.equal(charge.id, before.rows[0]!.id, 'the takeover reused the charge created before the crash');
      assert.deepEqual(charge.metadata, { point });
      assertReplayOf(await postCharge(b, { apiKey, key, body }), res);
      const psp = await pspCharges(b, customer);
      assert.deepEqual(
        psp.map((c) => c.id),
        [charge.psp_charge_id],
        'exactly one PSP charge',
      );

      await assertLocalCharge(b, apiKey, charge);
      if (backend.multiProcess) {
        const { rows } = await db.inspect({ rows: localRows(customer) });
        assert.deepEqual(
          rows.map((r) => [r.id, r.status, r.psp_charge_id]),
          [[charge.id, 'succeeded', charge.psp_charge_id]],
          'exactly one local row',
        );
      } // On PGlite the table was read before the retry (one row, this id); the schema allows one row per key.
      await b.stop();
      return { before, charge, apiKey, key };
    }

    test('7. crash after phase 1 (after_charge_created): the retry resumes with the same charge id; one row, one PSP charge', T, async () => {
      const { before } = await crashScenario('after_charge_created');
      assert.equal(before.psp.length, 0, 'the PSP was not called before the crash');
      assert.equal(before.key[0]!.recovery_point, 'charge_created');
    });

    test(
      '7b. crash inside the PSP call after the PSP charged, before idem recorded it (psp_unrecorded): the derived key dedupes the repeated call; one PSP charge',
      T,
      async () => {
        const { before, charge, apiKey, key } = await crashScenario('psp_unrecorded');
        assert.equal(before.psp.length, 1, 'the PSP charge exists before the retry');
        assert.equal(before.key[0]!.recovery_point, 'charge_created', 'idem had not recorded the PSP call');
        assert.equal(before.key[0]!.psp_recorded, false, 'no psp_charged result was recorded');
        assert.equal(before.rows[0]!.psp_charge_id, null);
        // The retry called the PSP again with the same derived key, and got the same charge.
        const scope = 'tenant:' + createHash('sha256').update(apiKey).digest('base64url');
        const claimId = String(before.key[0]!.claim_id);
        assert.equal(before.psp[0]!.idempotency_key, deriveKey(scope, key, claimId, 'psp_charged'), 'the PSP saw the derived key');
        assert.equal(charge.psp_charge_id, before.psp[0]!.id, 'the retry got the charge made before the crash');
      },
    );

    test('8. crash after the PSP call (after_psp): the retry reuses the PSP charge; still one PSP charge', T, async () => {
      const { before, charge } = await crashScenario('after_psp');
      assert.equal(before.psp.length, 1, 'the PSP charge exists before the retry');
      assert.equal(charge.psp_charge_id, before.psp[0]!.id);
    });

    test('9. crash inside the finish transaction (in_finish): nothing of it committed; the retry completes; one PSP charge', T, async () => {
      const { before, charge } = await crashScenario('in_finish');
      assert.equal(before.psp.length, 1);
      assert.equal(before.rows[0]!.psp_charge_id, null, 'the UPDATE in the finish transaction was rolled back');
      assert.equal(before.key[0]!.recovery_point, 'psp_charged');
      assert.equal(charge.psp_charge_id, before.psp[0]!.id);
    });

    test('12. a stale worker cannot write: A frozen after phase 1, B takes over, A resumes and is fenced (B finished / B still working)', {
      ...T,
      skip: backend.multiProcess ? false : 'PGlite admits one process per data directory: two servers cannot share it (PostgreSQL only)',
    }, async () => {
      const db = backend.database();
      // A: slow PSP (1500 ms before its PSP call). B-fast finishes at once; B-slow is still
      // inside its own PSP call (2000 ms) when A wakes up, so only the fencing token (not
      // the key's state) can stop A there.
      const lease = { IDEM_LEASE_MS: '1000' };
      const [a, bFast, bSlow] = await Promise.all([
        start(db, { ...lease, PSP_LATENCY_MS: '3000' }),
        start(db, lease),
        start(db, { ...lease, PSP_LATENCY_MS: '2000' }),
      ]);
      const apiKey = `sk_test_${rand()}`;
      const one = async (statement: { sql: string; params?: unknown[] }) => (await db.inspect({ rows: statement })).rows;
      const keyRow = (key: string) =>
        one({ sql: `SELECT lock_version::int AS token, locked_until <= now() AS expired, state FROM idempotency_keys WHERE key = $1`, params: [key] });
      const scenario = (name: string, b: Server) => {
        const customer = `cus_t12_${name}_${rand()}`;
        return { name, b, key: `stale-${name}-${rand()}`, customer, body: { amount: 1200, currency: 'usd', customer } };
      };
      const finished = scenario('finished', bFast);
      const working = scenario('working', bSlow);
      const both = [finished, working];

      const aReplies = both.map((s) => settle(postCharge(a, { apiKey, key: s.key, body: s.body })));
      const phase1 = await Promise.all(
        both.map(
          async (s) =>
            (
              await until(
                `A to commit phase 1 of ${s.name}`,
                () => one(localRows(s.customer)),
                (rows) => rows.length === 1,
                10_000,
                10,
              )
            )[0]!,
        ),
      );
      a.child.kill('SIGSTOP');
      try {
        for (const s of both) assert.equal((await pspCharges(bFast, s.customer)).length, 0, 'A was frozen before its PSP call');
        const aTokens = new Map<string, number>();
        for (const s of both) {
          const [row] = await until(
            `A's lease on ${s.name} to run out`,
            () => keyRow(s.key),
            (rows) => rows[0]?.expired === true,
            10_000,
            50,
          );
          aTokens.set(s.name, Number(row!.token));
        }

        // B-fast takes over and finishes while A is frozen.
        const { res: finishedRes } = await retryUntilCreated(
          () => postCharge(bFast, { apiKey, key: finished.key, body: finished.body }),
          (r) => assertInProgress(r),
          20,
          10_000,
        );
        const finishedCharge = assertFresh(finishedRes, 'B-fast took over:');
        assert.equal(finishedCharge.id, phase1[0]!.id, 'B-fast resumed after phase 1');
        const [finishedRow] = await keyRow(finished.key);
        assert.ok(Number(finishedRow!.token) > aTokens.get('finished')!, `B-fast's token ${finishedRow!.token} is above A's ${aTokens.get('finished')}`);

        // B-slow takes over and is inside its PSP call when A wakes up.
        const workingReply = settle(postCharge(bSlow, { apiKey, key: working.key, body: working.body }));
        const aToken = aTokens.get('working')!;
        const [taken] = await until(
          'B-slow to take over',
          () => keyRow(working.key),
          (rows) => Number(rows[0]?.token) > aToken,
          10_000,
          10,
        );
        assert.equal(taken!.state, 'started');
        assert.equal(taken!.expired, false, "B-slow holds a valid lease under a token above A's");

        a.child.kill('SIGCONT');
        const aResults = await Promise.race([Promise.all(aReplies), sleep(20_000).then(() => assert.fail("A's clients got no answer within 20 s"))]);
        for (const [i, result] of aResults.entries()) {
          const message = `A's client (${both[i]!.name}):`;
          if (result.ok) {
            const problem = assertProblem(result.value, 409, PROBLEM + 'idempotency-lease-lost', message);
            assert.equal((problem.error as { type?: string }).type, 'idempotency_error');
          } else {
            assert.ok(['ECONNRESET', 'EPIPE'].includes((result.error as NodeJS.ErrnoException).code ?? ''), `${message} ${String(result.error)}`);
          }
        }
        const working2 = await workingReply;
        assert.ok(working2.ok, `B-slow failed: ${String(!working2.ok && working2.error)}`);
        const workingCharge = assertFresh(working2.value, 'B-slow finished despite the stale worker:');
        assert.equal(workingCharge.id, phase1[1]!.id);
        assert.equal(a.child.exitCode, null, 'A is still running');

        for (const [s, res, charge] of [
          [finished, finishedRes, finishedCharge],
          [working, working2.value, workingCharge],
        ] as const) {
          assert.deepEqual(
            (await pspCharges(bFast, s.customer)).map((c) => c.id),
            [charge.psp_charge_id],
            `${s.name}: exactly one PSP charge (the late PSP call was deduplicated by the derived key)`,
          );
          const rows = await one(localRows(s.customer));
          assert.equal(rows.length, 1, `${s.name}: one local row`);
          assert.equal(rows[0]!.status, 'succeeded');
          assert.equal(rows[0]!.psp_charge_id, charge.psp_charge_id);
          const [stored] = await one({ sql: `SELECT state, response_status, response_body FROM idempotency_keys WHERE key = $1`, params: [s.key] });
          assert.equal(stored!.state, 'done');
          assert.equal(stored!.response_status, 201);
          assert.ok(Buffer.from(stored!.response_body as Uint8Array).equals(res.body), `${s.name}: the stored response is B's`);
          assertReplayOf(await postCharge(a, { apiKey, key: s.key, body: s.body }), res, `${s.name}: replay from A:`);
          assertReplayOf(await postCharge(s.b, { apiKey, key: s.key, body: s.body }), res, `${s.name}: replay from B:`);
        }
      } finally {
        a.child.kill('SIGCONT');
      }
    });
  },
  { warmShared: false },
);
