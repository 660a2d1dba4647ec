/** The figures of a chaos run as a table: printed, and written into docs/reliability.md. */
import type { GatewayChaosOptions, GatewayChaosResult } from './gateway-harness.js';
import type { ChaosOptions, ChaosResult } from './harness.js';

/** One markdown table, idem and naive side by side. */
export function figuresTable(idem: ChaosResult, naive: ChaosResult | undefined): string {
  const rows: Array<[string, (r: ChaosResult) => string]> = [
    ['intents', (r) => String(r.intents)],
    ['  of which sent twice at once', (r) => String(r.duplicateSends)],
    ['HTTP attempts', (r) => String(r.attempts)],
    ['crashes injected (SIGKILL)', (r) => `${r.crashes.total} (${r.crashes.random} random, ${r.crashes.named} at named points)`],
    [
      '  at named points',
      (r) =>
        Object.entries(r.crashes.byPoint)
          .sort()
          .map(([p, n]) => `${p} ${n}`)
          .join(', ') || '-',
    ],
    [`${idem.database} connections cut`, (r) => `${r.connectionsCut.total} (${r.connectionsCut.midTransaction} mid-transaction)`],
    ['workers frozen past their lease (SIGSTOP)', (r) => String(r.pauses)],
    ['takeovers', (r) => (r.mode === 'naive' ? 'n/a' : String(r.takeovers))],
    ['stale writes fenced', (r) => (r.mode === 'naive' ? 'n/a (no fence)' : `${r.staleWritesFenced} (clients saw ${r.leaseLost409} lease-lost 409s)`)],
    ['duplicates: intents charged twice at the PSP', (r) => String(r.duplicates.psp)],
    ['duplicates: intents with two local charge rows', (r) => String(r.duplicates.local)],
    ['intents without a final answer', (r) => String(r.unanswered)],
    [
      'intents answered "failed permanently" (K23: leases ended unreleased maxAttempts times)',
      (r) => (r.mode === 'naive' ? 'n/a' : String(r.failedPermanently)),
    ],
    ['time to final response p50 / p99', (r) => `${r.p50Ms} ms / ${r.p99Ms} ms`],
    ['keys finished by the final completer pass', (r) => (r.mode === 'naive' ? 'n/a' : String(r.finalCompleter.reduce((n, p) => n + p.completed, 0)))],
    ['invariants', (r) => (r.violations.length === 0 ? 'all held' : `${r.violations.length} violated`)],
    ['run time', (r) => `${(r.durationMs / 1000).toFixed(1)} s`],
  ];
  const head = naive ? '| | idem | naive (SELECT-then-INSERT) |\n|---|---|---|' : '| | idem |\n|---|---|';
  return [head, ...rows.map(([name, f]) => `| ${name} | ${f(idem)} |${naive ? ` ${f(naive)} |` : ''}`)].join('\n');
}

/** The violations of each run, as lines. */
export function violationLines(results: Array<Pick<ChaosResult, 'violations'> & { mode: string }>): string[] {
  return results.flatMap((r) => r.violations.map((v) => `${r.mode}: ${v}`));
}

/** The settings a run used, as one line. */
export function settingsLine(o: Omit<ChaosOptions, 'databaseUrl' | 'mode' | 'log'>): string {
  return (
    `${o.workers} workers, ${o.intents} intents, ${o.concurrency} in flight, ${Math.round(o.duplicateRate * 100)}% sent twice at once, ` +
    `lease ${o.leaseMs} ms, a random SIGKILL every ~${o.killEveryMs} ms, crash rate ${o.crashRate} per named point, ` +
    `a SIGSTOP of ${o.pauseMs} ms every ~${o.pauseEveryMs} ms, a connection cut every ~${o.cutEveryMs} ms, ` +
    `PSP failure rate ${o.pspFailureRate}, completer every ${o.completerIntervalMs} ms`
  );
}

/** The gateway drill's figures (`npm run chaos -- --gateway`), as one markdown table. */
export function gatewayTable(r: GatewayChaosResult): string {
  const rows: Array<[string, string]> = [
    ['intents (of which sent twice at once)', `${r.intents} (${r.duplicateSends})`],
    ['HTTP attempts by the clients / requests the upstream got', `${r.attempts} / ${r.upstreamAttempts}`],
    ['gateways SIGKILLed and restarted', String(r.kills)],
    ['gateways frozen past their lease (SIGSTOP)', String(r.freezes)],
    ['PostgreSQL connections cut', `${r.connectionsCut.total} (${r.connectionsCut.midTransaction} mid-transaction)`],
    ['keys taken over (the upstream saw a higher token)', String(r.takenOver)],
    ["upstream attempts refused by its fence (a lower token than the effect's)", String(r.staleFenced)],
    ["double effects (keys with > 1 row in the upstream's ledger)", String(r.doubleEffects)],
    ['lost (acknowledged without its effect)', String(r.lost)],
    ['intents without a final answer', String(r.unanswered)],
    ['intents whose answers were not byte-identical', String(r.differing)],
    ['intents answered "failed permanently" (K23)', String(r.failedPermanently)],
    ['time to final response p50 / p99', `${r.p50Ms} ms / ${r.p99Ms} ms`],
    ['invariants', r.violations.length === 0 ? 'all held' : `${r.violations.length} violated`],
    ['run time', `${(r.durationMs / 1000).toFixed(1)} s`],
  ];
  return ['| | idem gateway |', '|---|---|', ...rows.map(([name, value]) => `| ${name} | ${value} |`)].join('\n');
}

/** The drill's settings, as one line. */
export function gatewaySettingsLine(o: Omit<GatewayChaosOptions, 'databaseUrl' | 'log'>): string {
  return (
    `${o.gateways} gateways, ${o.intents} intents, ${o.concurrency} in flight, ${Math.round(o.duplicateRate * 100)}% sent twice at once, ` +
    `lease ${o.leaseMs} ms, upstream work 0-${o.upstreamDelayMs} ms (${Math.round(o.slowRate * 100)}% of intents ${o.slowMs} ms), a random SIGKILL every ~${o.killEveryMs} ms, ` +
    `a SIGSTOP of ${o.pauseMs} ms every ~${o.pauseEveryMs} ms, a connection cut every ~${o.cutEveryMs} ms`
  );
}
