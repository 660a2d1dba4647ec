/**
 * The `idem` command line: migrate, sweep, inspect, stats and partitions, on PostgreSQL
 * (`--database-url` / `DATABASE_URL`) or embedded PGlite (`--data-dir`, default `./.idem-data`).
 * Parsing by commander, the progress bar by cli-progress, durations by ms. Every command
 * prints one line `error: ...` to stderr and exits 1 on bad input or an unreachable
 * database; usage errors exit 1 as well (commander's convention).
 */
import { Command, Option } from 'commander';
import cliProgress from 'cli-progress';
import type { SweepProgress, SweepReport } from '../store/sweep.js';
import { replicationAtRisk } from '../store/inspection.js';
import type { Completer } from '../http/index.js';
import type { SqlClient } from '../postgres/client.js';

/** What `idem complete --app <module>` calls: the app's completer on the CLI's connection. */
// biome-ignore lint/suspicious/noExplicitAny: the app picks its transaction type, which the CLI never touches
export type CreateCompleter = (context: { client: SqlClient; table: string }) => Completer<any> | Promise<Completer<any>>;
import { CliError, describeError } from './database.js';
import {
  type CliIo,
  type ConnectionOptions,
  count,
  defaultIo,
  untilStopped,
  duration,
  iso,
  positiveInteger,
  retentionOption,
  withConnection,
  withStore,
} from './options.js';
export type { CliIo } from './options.js';
import { type Dashboard, startDashboard } from './dashboard.js';
import { addOperatorCommands, cliTelemetry } from './operator-commands.js';
import { addGatewayCommand, CONFIG_EXIT_CODE } from './gateway.js';
import { GatewayConfigError } from '../gateway/config.js';

/**
 * Builds the program. `io` receives the output lines (stdout for results, stderr for errors
 * and the progress bar).
 */
export function buildProgram(io: CliIo = defaultIo): Command {
  const program = new Command('idem')
    .description(
      "Operate idem's idempotency-key table: migrate, sweep expired keys, inspect a key, release or forget a key, table stats, a dashboard page, complete abandoned keys, partitions.",
    )
    .version(VERSION)
    .showHelpAfterError('(run idem --help for usage)')
    .configureOutput({ writeOut: (s) => io.out(s.replace(/\n$/, '')), writeErr: (s) => io.err(s.replace(/\n$/, '')) });

  // ---- migrate --------------------------------------------------------------------------
  withConnection(program.command('migrate'))
    .description('create or upgrade the key table (idempotent; safe from several hosts at once)')
    .option('--partitioned', 'create the table partitioned by created_at, one partition per UTC day')
    .addOption(new Option('--days-ahead <days>', 'partitioned: daily partitions to keep ready ahead of today').argParser(positiveInteger('--days-ahead')))
    .option('--distribute', 'Citus (connect to the coordinator): distribute the table and <table>_blobs by scope, co-located')
    .action(async (options: ConnectionOptions & { daysAhead?: number }) => {
      await withStore(
        options,
        async (store, db) => {
          const result = await store.migrate();
          if (options.distribute && !store.distribute) throw new CliError('--distribute: Citus mode is PostgreSQL only');
          const distributed = options.distribute ? await store.distribute?.() : undefined;
          const mode = store.partitioning ? 'partitioned' : store.distributed ? 'distributed' : 'plain';
          if (options.json) {
            return io.out(
              JSON.stringify({
                table: store.table,
                mode,
                location: db.location,
                result: result.table,
                partitionsCreated: result.partitionsCreated,
                ...(distributed ? { distributed } : {}),
              }),
            );
          }
          io.out(
            result.table === 'created'
              ? `Created ${mode} table ${store.table} in ${db.location}.`
              : `Table ${store.table} (${mode}) in ${db.location} is up to date.`,
          );
          if (result.partitionsCreated.length > 0) io.out(`Created partitions: ${result.partitionsCreated.join(', ')}.`);
          if (distributed) {
            const what = (r: 'distributed' | 'exists') => (r === 'distributed' ? 'distributed by scope now' : 'already distributed by scope');
            io.out(
              `${store.table}: ${what(distributed.table)}; ${store.table}_blobs: ${what(distributed.blobs)} (co-location group ${distributed.colocationId}).`,
            );
            io.out(`Co-locate each table a phase writes with it, distributed by the column that holds the scope (the tenant):`);
            io.out(`  ${distributed.colocateHint}`);
            io.out(`Open the store with { distributed: 'citus' } and connect through the coordinator.`);
          }
        },
        { mustExist: false, daysAhead: options.daysAhead },
      );
    });

  // ---- sweep ----------------------------------------------------------------------------
  withConnection(program.command('sweep'))
    .description('delete keys past retention: batches by key range (plain table) or whole-day partition drops (partitioned)')
    .addOption(retentionOption())
    .addOption(new Option('--batch-size <rows>', 'rows per DELETE statement').default(1000).argParser(positiveInteger('--batch-size')))
    .addOption(
      new Option('--max-duration <duration>', 'start no new batch after this long (e.g. 30s, 10m); default: until done').argParser(duration('--max-duration')),
    )
    .option('--dry-run', 'count what would be deleted; delete nothing')
    .addOption(new Option('--progress', 'draw the progress bar even when stderr is not a terminal'))
    .addOption(new Option('--no-progress', 'never draw the progress bar'))
    .action(async (options: ConnectionOptions & { retention: number; batchSize: number; maxDuration?: number; dryRun?: boolean; progress?: boolean }) => {
      await withStore(options, async (store) => {
        const plan = await store.sweepPlan(options.retention);
        if (options.dryRun) {
          if (options.json) return io.out(JSON.stringify({ dryRun: true, ...plan }));
          io.out(
            `Dry run: ${count(plan.sweepable)} rows would be deleted from ${store.table} ` +
              `(${count(plan.expired)} created at or before ${iso(plan.cutoff)}; ${count(plan.expired - plan.sweepable)} kept: lease still valid).`,
          );
          if (store.partitioning) {
            io.out(
              plan.expiredPartitions.length ? `Partitions that would be dropped: ${plan.expiredPartitions.join(', ')}.` : 'No partition is past retention.',
            );
          }
          return;
        }
        const drawBar = options.progress ?? io.progressStream.isTTY === true;
        let bar = drawBar
          ? new cliProgress.SingleBar(
              {
                stream: io.progressStream,
                noTTYOutput: !io.progressStream.isTTY,
                format: 'sweep [{bar}] {percentage}% | {value}/{total} rows | deleted {deleted} | ETA {eta_formatted}',
                hideCursor: io.progressStream.isTTY ? true : null,
                etaBuffer: 50,
              },
              cliProgress.Presets.shades_classic,
            )
          : undefined;
        const total = store.partitioning ? plan.expiredPartitions.length : plan.expired;
        if (total === 0) bar = undefined;
        bar?.start(total, 0, { deleted: 0 });
        let report: SweepReport;
        try {
          report = await store.sweepReport({
            retentionMs: options.retention,
            batchSize: options.batchSize,
            maxDurationMs: options.maxDuration,
            onProgress: (p: SweepProgress) =>
              bar?.update(store.partitioning ? p.droppedPartitions.length : Math.min(p.scanned, plan.expired), { deleted: p.deleted }),
          });
        } finally {
          bar?.stop();
        }
        if (options.json) return io.out(JSON.stringify(report));
        const seconds = (report.durationMs / 1000).toFixed(1);
        if (store.partitioning) {
          io.out(
            `Dropped ${report.droppedPartitions.length} partition(s) of ${store.table} holding ${count(report.deleted)} rows in ${seconds} s` +
              (report.droppedPartitions.length ? ` (${report.droppedPartitions.join(', ')})` : '') +
              '.',
          );
          if (report.keptPartitions.length) io.out(`Kept (a lease is still valid, or the lock timed out): ${report.keptPartitions.join(', ')}.`);
        } else {
          io.out(
            `Deleted ${count(report.deleted)} rows past retention from ${store.table} in ${report.batches} batch(es), ${seconds} s ` +
              `(cutoff ${iso(report.cutoff)}; ${count(report.scanned - report.deleted)} kept: lease still valid or locked).`,
          );
        }
        if (report.timedOut) io.out(`Stopped by --max-duration; run again to continue.`);
      });
    });

  // ---- inspect --------------------------------------------------------------------------
  withConnection(program.command('inspect'))
    .description('show one key: state, recovery point, lease, fencing token, response summary')
    .argument('<scope>', "the key's scope (as the scope resolver returned it; default scopes are hashes)")
    .argument('<key>', 'the idempotency key')
    .addOption(retentionOption())
    .action(async (scope: string, key: string, options: ConnectionOptions & { retention: number }) => {
      await withStore(options, async (store) => {
        const record = await store.inspect(scope, key, options.retention);
        if (!record) throw new CliError(`no key ${JSON.stringify(key)} in scope ${JSON.stringify(scope)} in ${store.table}`);
        if (options.json) return io.out(JSON.stringify(record));
        const lease = record.lockedUntil
          ? record.leaseExpired
            ? `expired at ${iso(record.lockedUntil)}`
            : `held until ${iso(record.lockedUntil)} (${Math.ceil(record.leaseRemainingMs / 1000)} s left)`
          : 'none';
        const lines: Array<[string, string]> = [
          ['scope', record.scope],
          ['key', record.key],
          ['state', record.state],
          ['recovery point', record.recoveryPoint],
          ['phases', Object.keys(record.phaseResults).join(', ') || '-'],
          ['lease', lease],
          ['lock_version', record.token],
          ['claim id', record.claimId],
          ['fingerprint', record.fingerprint],
          ['created', `${iso(record.createdAt)}${record.retentionExpired ? ' (past retention: counts as absent)' : ''}`],
          ['finished', iso(record.finishedAt)],
          ['operator', record.operatorNote ?? '-'],
          [
            'response',
            record.response
              ? `${record.response.status}, ${count(record.response.bytes)} bytes ${record.response.storage}${record.response.keyId ? `, sealed with key ${record.response.keyId}` : ''}, headers: ${record.response.headers.map(([n]) => n).join(', ') || '-'}`
              : '-',
          ],
        ];
        for (const [name, value] of lines) io.out(`${(name + ':').padEnd(16)}${value}`);
      });
    });

  // ---- stats ----------------------------------------------------------------------------
  withConnection(program.command('stats'))
    .description('rows by state, oldest row, rows past retention not yet swept, abandoned keys')
    .addOption(retentionOption())
    .action(async (options: ConnectionOptions & { retention: number }) => {
      await withStore(options, async (store, db) => {
        const stats = await store.stats(options.retention);
        if (options.json) return io.out(JSON.stringify(stats));
        io.out(`${store.table} in ${db.location} (${store.partitioning ? 'partitioned' : store.distributed ? 'distributed' : 'plain'}):`);
        io.out(`  rows:                       ${count(stats.total)} (started ${count(stats.started)}, done ${count(stats.done)})`);
        io.out(`  oldest row:                 ${iso(stats.oldest)}`);
        io.out(`  past retention, unswept:    ${count(stats.expiredUnswept)}`);
        io.out(`  in progress, lease expired: ${count(stats.abandoned)}`);
        io.out(`  live leases:                ${count(stats.liveLeases)}`);
        if (stats.partitions) {
          io.out(`  partitions:                 ${stats.partitions.map((p) => p.day + (p.expired ? ' (expired)' : '')).join(', ') || '-'}`);
        }
        const r = stats.replication;
        if (r) {
          io.out(
            `  streaming standbys:         ${r.standbys} (synchronous ${r.synchronous}${r.unknown ? `, unknown ${r.unknown}` : ''}; synchronous_commit = ${r.synchronousCommit})`,
          );
        }
        if (replicationAtRisk(r)) {
          io.err(
            'WARNING: this server streams to standbys and none is synchronous (or synchronous_commit does not wait for one). ' +
              'After a failover to an asynchronous standby, keys the primary acknowledged can be missing, and their retries run again: ' +
              'a retried payment can charge twice. Use a synchronous standby (synchronous_standby_names) with synchronous_commit = on. See docs/reliability.md.',
          );
        }
      });
    });

  // ---- partitions -----------------------------------------------------------------------
  withConnection(program.command('partitions'))
    .description('partitioned table: create the daily partitions ahead (run at least daily) and list them')
    .addOption(new Option('--days-ahead <days>', 'daily partitions to keep ready ahead of today').default(7).argParser(positiveInteger('--days-ahead')))
    .action(async (options: ConnectionOptions & { daysAhead: number }) => {
      await withStore(
        { ...options, partitioned: false },
        async (store) => {
          if (!store.partitioning || !store.maintain) throw new CliError(`table ${store.table} is not partitioned (create it with idem migrate --partitioned)`);
          const created = await store.maintain();
          const stats = await store.stats();
          if (options.json) return io.out(JSON.stringify({ created, partitions: stats.partitions }));
          io.out(created.length ? `Created partitions: ${created.join(', ')}.` : 'All partitions are in place.');
          io.out(`Partitions of ${store.table}: ${(stats.partitions ?? []).map((p) => p.name).join(', ')}.`);
        },
        { mustExist: true, daysAhead: options.daysAhead },
      );
    });

  // ---- release, forget (operator-commands.ts) ---------------------------------------------
  addOperatorCommands(program, io);

  // ---- dashboard ------------------------------------------------------------------------
  withConnection(program.command('dashboard'))
    .description(
      'serve a page over the key table: keys by state over time, stuck and failing keys, oldest, past retention, partitions, a key inspector; with --token, release a stuck key',
    )
    .addOption(
      new Option('--port <port>', 'port to listen on (0: any free port)').default(7117).argParser((v) => (v === '0' ? 0 : positiveInteger('--port')(v))),
    )
    .addOption(new Option('--host <address>', 'address to listen on; anything but loopback needs --token').default('127.0.0.1'))
    .addOption(
      new Option('--token <token>', 'enables actions; required of every API request (Authorization: Bearer; the page takes it once from ?token=)').env(
        'IDEM_DASHBOARD_TOKEN',
      ),
    )
    .addOption(
      new Option('--allowed-host <name>', 'also answer this Host (e.g. the name a reverse proxy forwards; repeatable)')
        .argParser((value: string, previous: string[] = []) => [...previous, value])
        .default([]),
    )
    .addOption(retentionOption())
    .action(async (options: ConnectionOptions & { port: number; host: string; token?: string; allowedHost: string[]; retention: number }) => {
      await withStore(options, async (store) => {
        let dashboard: Dashboard;
        try {
          dashboard = await startDashboard({
            store,
            host: options.host,
            port: options.port,
            token: options.token,
            allowedHosts: options.allowedHost,
            retentionMs: options.retention,
            telemetry: await cliTelemetry(),
          });
        } catch (error) {
          throw new CliError(describeError(error));
        }
        io.out(`idem dashboard on ${dashboard.url} (${options.token ? 'actions need the token' : 'read-only; --token enables actions'}; Ctrl-C stops it)`);
        await untilStopped();
        await dashboard.close();
      });
    });

  // ---- complete -------------------------------------------------------------------------
  withConnection(program.command('complete'))
    .description('one completer pass: take over keys whose lease expired with no retry coming and drive them to completion from their recovery point')
    .requiredOption(
      '--app <module>',
      "module exporting createCompleter({ client, table }) that returns your app's Completer (it knows how to run a stored request)",
    )
    .action(async (options: ConnectionOptions & { app: string }) => {
      await withStore(options, async (store, db) => {
        const { pathToFileURL } = await import('node:url');
        const { resolve } = await import('node:path');
        let mod: { createCompleter?: unknown };
        try {
          mod = (await import(pathToFileURL(resolve(options.app)).href)) as { createCompleter?: unknown };
        } catch (error) {
          throw new CliError(`--app: cannot load ${options.app}: ${describeError(error)}`);
        }
        if (typeof mod.createCompleter !== 'function') {
          throw new CliError(`--app: ${options.app} does not export a function createCompleter({ client, table })`);
        }
        const completer = (await (mod.createCompleter as CreateCompleter)({ client: db.client, table: store.table })) as Partial<Completer>;
        if (typeof completer?.runOnce !== 'function') throw new CliError(`--app: createCompleter() did not return a Completer (no runOnce)`);
        const report = await completer.runOnce();
        if (options.json) return io.out(JSON.stringify(report));
        io.out(
          `Completer pass on ${store.table} in ${db.location}: ${count(report.found)} abandoned found, ${count(report.completed)} completed, ` +
            `${count(report.discarded)} discarded (nothing had run), ${count(report.failed)} failed, ${count(report.lost)} taken by another worker, ` +
            `${count(report.skipped)} skipped (no stored request).`,
        );
      });
    });

  // ---- gateway --------------------------------------------------------------------------
  addGatewayCommand(program, io);

  return program;
}

/** The package version, read from package.json next to src/ or dist/. */
const VERSION: string = await (async () => {
  try {
    const { readFile } = await import('node:fs/promises');
    const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
    return pkg.version ?? '0.0.0';
  } catch {
    return '0.0.0';
  }
})();

/**
 * Runs the CLI on `argv` (as `process.argv`). Resolves to the exit code: 0 on success, 2 on a gateway
 * configuration refused, 1 on any other error, after printing it as one line `error: ...`.
 */
export async function run(argv: string[], io: CliIo = defaultIo): Promise<number> {
  const program = buildProgram(io);
  program.exitOverride();
  for (const command of program.commands) command.exitOverride();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (error) {
    const code = (error as { code?: string }).code;
    if (code === 'commander.helpDisplayed' || code === 'commander.version' || code === 'commander.help') return 0;
    if (typeof code === 'string' && code.startsWith('commander.')) return (error as { exitCode?: number }).exitCode || 1;
    io.err(`error: ${describeError(error)}`);
    return error instanceof GatewayConfigError ? CONFIG_EXIT_CODE : 1;
  }
}
