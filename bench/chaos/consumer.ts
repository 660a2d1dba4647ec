/**
 * The long consumer chaos run (issue 15): `npm run chaos -- --consumer rabbitmq [--messages 10000]`
 * (or `tsx bench/chaos/consumer.ts`). Runs bench/chaos/consumer-harness.ts with idem, then the
 * naive baseline, and prints the figures for docs/reliability.md. Exits 1 when an idem invariant
 * failed or the naive run showed no duplicates. Needs DATABASE_URL and RabbitMQ (AMQP_URL, default 127.0.0.1:5672).
 */
import { parseArgs } from 'node:util';
import { runConsumerChaos } from './consumer-harness.js';

const { values } = parseArgs({
  options: {
    consumer: { type: 'string', default: 'rabbitmq' },
    messages: { type: 'string', default: '10000' },
    'naive-messages': { type: 'string', default: '500' },
    'kill-every-ms': { type: 'string', default: '200' },
  },
});
if (values.consumer !== 'rabbitmq') {
  console.error('only --consumer rabbitmq is implemented (NATS JetStream: not yet)');
  process.exit(2);
}
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error('DATABASE_URL is required');
  process.exit(2);
}
const messages = Number(values.messages);
const idem = await runConsumerChaos({ databaseUrl, mode: 'idem', messages, killEveryMs: Number(values['kill-every-ms']), timeoutMs: 3_600_000 });
const naive = await runConsumerChaos({ databaseUrl, mode: 'naive', messages: Number(values['naive-messages']), timeoutMs: 600_000 });
const cell = (x: { duplicated: number; missing: number }) => `${x.duplicated} / ${x.missing}`;
console.log('| run | messages × copies | kills | freezes | seconds | invoices dup / lost | PSP charges dup / lost | outbox events dup / lost |');
console.log('|---|---|---|---|---|---|---|---|');
console.log(
  `| idem | ${idem.messages} × 2 | ${idem.kills} | ${idem.freezes} | ${idem.seconds.toFixed(0)} | ${cell(idem.invoices)} | ${cell(idem.charges)} | ${cell(idem.outbox)} |`,
);
console.log(
  `| naive | ${naive.messages} × 2 | 0 | 0 | ${naive.seconds.toFixed(0)} | ${cell(naive.invoices)} | ${cell(naive.charges)} | (published directly) |`,
);
const ok = idem.finished && [idem.invoices, idem.charges, idem.outbox].every((x) => x.duplicated === 0 && x.missing === 0) && naive.invoices.duplicated > 0;
process.exit(ok ? 0 : 1);
