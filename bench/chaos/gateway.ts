/**
 * `npm run chaos -- --gateway [--intents 600] [--gateways 2] [--concurrency 16]`: the gateway's
 * crash drill (issue 41; bench/chaos/gateway-harness.ts) on DATABASE_URL's PostgreSQL, in front
 * of the Python upstream. Prints the figures (docs/reliability.md, "Gateway"); exits 1 when an
 * invariant failed.
 */
import { parseArgs } from 'node:util';
import { GATEWAY_DEFAULTS, runGatewayChaos } from './gateway-harness.js';
import { gatewaySettingsLine, gatewayTable, violationLines } from './report.js';

let values: { gateway?: boolean; intents?: string; gateways?: string; concurrency?: string };
try {
  ({ values } = parseArgs({
    options: { gateway: { type: 'boolean' }, intents: { type: 'string' }, gateways: { type: 'string' }, concurrency: { type: 'string' } },
  }));
} catch (error) {
  console.error(`npm run chaos -- --gateway: ${(error as Error).message} (takes --intents, --gateways, --concurrency)`);
  process.exit(2);
}
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error('npm run chaos -- --gateway: set DATABASE_URL to a PostgreSQL server; a fresh database is created on it and dropped after.');
  process.exit(2);
}
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(130));
const settings = {
  ...GATEWAY_DEFAULTS,
  ...(values.intents ? { intents: Number(values.intents) } : {}),
  ...(values.gateways ? { gateways: Number(values.gateways) } : {}),
  ...(values.concurrency ? { concurrency: Number(values.concurrency) } : {}),
};
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);
console.log(`chaos --gateway: ${gatewaySettingsLine(settings)}`);
const result = await runGatewayChaos({ ...settings, databaseUrl, log });
console.log('\n' + gatewayTable(result) + '\n');
const violations = violationLines([result]);
for (const line of violations) console.log(`VIOLATED ${line}`);
console.log(violations.length === 0 ? 'idem gateway: every invariant held.' : 'idem gateway: INVARIANTS VIOLATED.');
process.exit(violations.length === 0 ? 0 : 1);
