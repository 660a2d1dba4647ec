/**
 * `idem stats` against a primary with a streaming standby (local instances started from the
 * PostgreSQL server binaries, see bench/lib/pg-cluster.ts): with an asynchronous standby it
 * warns that a failover can run a retried payment twice; with a synchronous one it does not.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { haveServerBinaries, startCluster, type Cluster } from '../bench/lib/pg-cluster.js';
import { fullMatrixOnly } from './helpers/services.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const idem = (args: string[], env: Record<string, string>) =>
  spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/main.ts', ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });

// Two PostgreSQL servers started per suite: the full matrix only (npm run test:all).
describe('idem stats and streaming replication', {
  skip: fullMatrixOnly() || (haveServerBinaries() ? false : 'needs the PostgreSQL server binaries (PG_BIN)'),
  timeout: 180_000,
}, () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster({ sync: false });
  });
  after(async () => {
    await cluster?.destroy();
  });

  it('an asynchronous standby: a WARNING on stderr naming the rule; --json carries the counts', () => {
    const env = { DATABASE_URL: cluster.primary.url() };
    assert.equal(idem(['migrate'], env).status, 0);
    const stats = idem(['stats'], env);
    assert.equal(stats.status, 0, stats.stderr);
    assert.match(stats.stdout, /streaming standbys:\s+1 \(synchronous 0; synchronous_commit = on\)/);
    assert.match(stats.stderr, /^WARNING: this server streams to standbys and none is synchronous/);
    assert.match(stats.stderr, /synchronous_commit = on/);
    const json = JSON.parse(idem(['stats', '--json'], env).stdout) as { replication: unknown };
    assert.deepEqual(json.replication, { standbys: 1, synchronous: 0, unknown: 0, synchronousCommit: 'on' });
  });

  it('a synchronous standby: no warning', async () => {
    await cluster.setSynchronous(true);
    const stats = idem(['stats'], { DATABASE_URL: cluster.primary.url() });
    assert.equal(stats.status, 0, stats.stderr);
    assert.match(stats.stdout, /streaming standbys:\s+1 \(synchronous 1; synchronous_commit = on\)/);
    assert.doesNotMatch(stats.stderr, /WARNING/);
  });

  it('no standby (the shared test server): no replication warning', () => {
    if (!process.env.DATABASE_URL) return;
    const stats = idem(['stats', '--table', 'idem_no_such_table_for_stats'], { DATABASE_URL: process.env.DATABASE_URL });
    assert.doesNotMatch(stats.stderr, /WARNING/);
  });
});

describe('bench/replication.ts', {
  skip: fullMatrixOnly() || (haveServerBinaries() ? false : 'needs the PostgreSQL server binaries (PG_BIN)'),
  timeout: 300_000,
}, () => {
  it('reproduces both figures on local instances: 0 charged again with a synchronous standby, some with an asynchronous one', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'bench/replication.ts', '--keys', '20', '--no-write'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 280_000,
    });
    assert.equal(run.status, 0, run.stdout + run.stderr);
    const row = (mode: string) => {
      const match = new RegExp(`^\\| ${mode} \\| (\\d+) \\| (\\d+) \\| \\*\\*(\\d+)\\*\\* of \\d+ \\| (\\d+) \\|$`, 'm').exec(run.stdout);
      assert.ok(match, `${mode} row in:\n${run.stdout}`);
      return { acknowledged: Number(match[1]), replayed: Number(match[2]), ranAgain: Number(match[3]), inProgress: Number(match[4]) };
    };
    assert.deepEqual(row('synchronous'), { acknowledged: 20, replayed: 20, ranAgain: 0, inProgress: 0 });
    const async = row('asynchronous');
    assert.equal(async.acknowledged, 20);
    assert.ok(async.ranAgain >= 5, `charges acknowledged after the standby fell behind ran again (${async.ranAgain})`);
    assert.equal(async.replayed + async.ranAgain + async.inProgress, 20);
  });
});
