/**
 * `npm run chaos -- --help` prints usage and exits 0, with or without DATABASE_URL, and an
 * unknown option prints the usage with a one-line error (exit 2), never a stack trace.
 */
import { it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const chaos = (args: string[], env: Record<string, string>) =>
  spawnSync(process.execPath, ['--import', 'tsx', 'bench/chaos/run.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });

for (const env of [{ DATABASE_URL: '' }, { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' }]) {
  it(`--help and -h print usage and exit 0 (DATABASE_URL ${env.DATABASE_URL ? 'set' : 'unset'})`, () => {
    for (const flag of ['--help', '-h']) {
      const run = chaos([flag], env);
      assert.equal(run.status, 0, run.stderr);
      assert.match(run.stdout, /^Usage: DATABASE_URL=postgres:\/\/… npm run chaos -- \[options\]/);
      assert.match(run.stdout, /--no-naive/);
      assert.doesNotMatch(run.stderr, /\bat .*\.ts:\d+/, 'no stack trace');
    }
  });
}

it('an unknown option: one-line error and the usage on stderr, exit 2, no stack trace', () => {
  const run = chaos(['--intens', '5'], { DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
  assert.equal(run.status, 2);
  assert.match(run.stderr, /^npm run chaos: Unknown option '--intens'/);
  assert.match(run.stderr, /Usage:/);
  assert.doesNotMatch(run.stderr, /\bat .*\.ts:\d+/);
});
