/**
 * Runs test files with node:test two at a time (one per core of a small machine), the longest
 * first. `node --test` sorts its files by name whatever order they are given in, so a long
 * file late in the alphabet would end the run alone on one core; node:test's `run()` keeps the
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
  // Full matrix (CPU time alone, before: store contract 148 s, adapters 68 s): every store entry,
  // every harness on four stores, the fault contract's child per fault.
  'test/store-contract.test.ts',
  'test/adapters.test.ts',
  'test/connection-faults.test.ts',
  // npm test (CPU time alone: 20 to 36 s each): the Next build on a fresh clone, chromium,
  // PGlite per store entry, a large body per shape.
  'test/large-responses.test.ts',
  'test/adapters-next.test.ts',
  'test/dashboard.test.ts',
  'test/kysely-prisma.test.ts',
  'test/response-shapes.test.ts',
  'test/adapters-fastify-nest.test.ts',
  'test/guide-examples.test.ts',
  'test/client.test.ts',
  'test/function-examples.test.ts',
  'test/cli.test.ts',
  'test/lambda.test.ts',
  'test/drizzle-example.test.ts',
  'test/function.test.ts',
  'test/koa.test.ts',
  'test/max-attempts.test.ts',
];

const given = process.argv.slice(2);
const files = [...new Set([...LONGEST.filter((file) => given.includes(file)), ...given.toSorted()])];

const stream = run({ files, concurrency: 2 });
stream.on('test:fail', (event: { todo?: unknown; skip?: unknown }) => {
  if (!event.todo && !event.skip) process.exitCode = 1;
});
stream.compose(spec).pipe(process.stdout);
