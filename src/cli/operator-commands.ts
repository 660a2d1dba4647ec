/**
 * `idem release <scope> <key>` and `idem forget <scope> <key>` (protocol.md K40-K42): one
 * operator action through `idem/operator`, on the table as it exists. Each prints what it did,
 * or why it refused (then exits 1, nothing changed); the action is recorded on the key's row
 * and, when `@opentelemetry/api` is installed, reported as the span `idem.operator <action>`
 * to the global tracer provider (set one up with `node --import <your otel setup> idem ...`).
 */
import { userInfo } from 'node:os';
import { type Command, Option } from 'commander';
import type { IdempotencyTelemetry } from '../engine/telemetry.js';
import { forgetKey, type OperatorOptions, releaseKey } from '../operator/index.js';
import { CliError } from './database.js';
import { type CliIo, type ConnectionOptions, positiveInteger, retentionOption, withConnection, withStore } from './options.js';

interface OperatorCliOptions extends ConnectionOptions {
  retention: number;
  token?: number;
  by?: string;
  reason?: string;
  force?: boolean;
}

/** Adds `release` and `forget` to `program`. */
export function addOperatorCommands(program: Command, io: CliIo): void {
  operatorCommand(program, 'release', io)
    .description(
      'free a started key now: its lease ends and its token advances, so the next request takes it over and resumes (refused while a worker holds the lease, unless --force)',
    )
    .option('--force', 'also end a lease a worker still holds: that worker is fenced at its next write (its uncommitted effects roll back)');
  operatorCommand(program, 'forget', io).description(
    'make a finished key run again: its stored response is dropped and the next request with the same key and body runs from the start (refused on a started key)',
  );
}

function operatorCommand(program: Command, action: 'release' | 'forget', io: CliIo): Command {
  return withConnection(program.command(action))
    .argument('<scope>', "the key's scope (as `idem inspect` and the dashboard show it)")
    .argument('<key>', 'the idempotency key')
    .addOption(retentionOption())
    .addOption(new Option('--token <n>', 'act only if the key still has this fencing token (the one you inspected)').argParser(positiveInteger('--token')))
    .addOption(new Option('--by <name>', 'who acts, recorded on the row').default(defaultUser()))
    .option('--reason <text>', 'why (a ticket, a sentence), recorded on the row')
    .action(async (scope: string, key: string, options: OperatorCliOptions) => {
      await withStore(options, async (store) => {
        const settings: OperatorOptions = { retentionMs: options.retention, force: options.force === true };
        if (options.token !== undefined) settings.token = options.token;
        if (options.by) settings.by = options.by;
        if (options.reason) settings.reason = options.reason;
        const telemetry = await cliTelemetry();
        if (telemetry) settings.telemetry = telemetry;
        const outcome = await (action === 'release' ? releaseKey : forgetKey)(store, scope, key, settings);
        if (options.json) io.out(JSON.stringify(outcome));
        if (!outcome.done) throw new CliError(`not ${action === 'release' ? 'released' : 'forgotten'}: ${outcome.message}`);
        if (!options.json) io.out(`${scope} ${key}: ${outcome.message}. Recorded on the row: ${outcome.note}`);
      });
    });
}

function defaultUser(): string {
  try {
    return userInfo().username;
  } catch {
    return 'idem-cli';
  }
}

/** `idem/otel` on the global providers when `@opentelemetry/api` is installed, else none. */
export async function cliTelemetry(): Promise<IdempotencyTelemetry | undefined> {
  try {
    const { openTelemetry } = await import('../otel/index.js');
    return await openTelemetry();
  } catch {
    return undefined;
  }
}
