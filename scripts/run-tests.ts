/**
 * Runs test files with node:test a few at a time ({@link concurrency}), the longest first.
 * `node --test` sorts its files by name whatever order they are given in, so a long file late
 * in the alphabet would end the run alone on one core; node:test's `run()` keeps the
 * order given. The files of {@link LONGEST} go first, in that order, then the rest by name.
 * Every file given runs once; a failed test (not a todo) sets exit code 1.
 *
 * usage: node --import tsx scripts/run-tests.ts test/*.test.ts
 * (the children inherit `--import tsx` from this process's execArgv)
 */
import { run } from 'node:test';
import { spec } from 'node:test/reporters';

/**
 * The files that take longest, longest first: measured alone (wall and CPU time, each file
 * with `/usr/bin/time`) in `npm test` and in the full matrix. Only the order matters: a file
 * missing here runs after these, by name.
 */
const LONGEST = [
  // Wall time alone in the full matrix (2026-12-03, two files at a time): the store contract
  // 187 s, the connection-fault contract 460 s before its clients ran three at once, the
  // adapter contract 106 s, Redis faults 98 s, chaos 84 s, then 25 to 50 s each. In npm test
  // the Next build (53 s on a fresh clone) and the payments processes lead.
  'test/store-contract.test.ts',
  'test/connection-faults.test.ts',
  'test/adapters.test.ts',
  'test/redis-connection-faults.test.ts',
  'test/chaos.test.ts',
  'test/gateway-chaos.test.ts',
  'test/adapters-next.test.ts',
  'test/payments-crash.test.ts',
  'test/wall-clock.test.ts',
  'test/cli.test.ts',
  'test/adapters-fastify-nest.test.ts',
  'test/payments-edges.test.ts',
  'test/crash-loops.test.ts',
  'test/adapters-lambda.test.ts',
  'test/packed-next-lambda-koa.test.ts',
  'test/payments-api.test.ts',
  'test/wait-mode-stores.test.ts',
  'test/engine-lease.test.ts',
  'test/payments-psp.test.ts',
  'test/payments-startup.test.ts',
  'test/client.test.ts',
  'test/dashboard.test.ts',
  'test/large-responses.test.ts',
  'test/guide-examples.test.ts',
];

const given = process.argv.slice(2);
const files = [...new Set([...LONGEST.filter((file) => given.includes(file)), ...given.toSorted()])];

/**
 * Files at once: two for `npm test` (its files keep both cores busy), three for the full matrix
 * (`IDEM_TEST_TIER=all`), whose files mostly wait on services, deadlines and leases (about 13
 * CPU-minutes in 34 minutes of file wall time). `IDEM_TEST_CONCURRENCY` overrides it.
 */
const concurrency = Number(process.env.IDEM_TEST_CONCURRENCY) || (process.env.IDEM_TEST_TIER === 'all' ? 3 : 2);

const stream = run({ files, concurrency });
stream.on('test:fail', (event: { todo?: unknown; skip?: unknown }) => {
  if (!event.todo && !event.skip) process.exitCode = 1;
});
stream.compose(spec).pipe(process.stdout);
