/**
 * The long consumer chaos run (issue 15): `npm run chaos -- --consumer rabbitmq|nats [--messages
 * 10000] [--crash-loops 20]` (or `tsx bench/chaos/consumer.ts`). Runs
 * bench/chaos/consumer-harness.ts with idem, then the naive baseline (RabbitMQ), and prints the
 * figures for docs/reliability.md. With crash loops (default 1 % of the messages, at least 5),
 * that many poison messages kill their consumer on every delivery and must be dead-lettered
 * after at most `maxAttempts` (5) runs (protocol.md K23). Exits 1 when an idem invariant failed
 * or the naive run showed no duplicates. Needs DATABASE_URL and RabbitMQ (AMQP_URL, default 127.0.0.1:5672) or NATS (NATS_URL, default 127.0.0.1:4222).
 */
import { parseArgs } from 'node:util';
import { runConsumerChaos } from './consumer-harness.js';

const { values } = parseArgs({
  options: {
    consumer: { type: 'string', default: 'rabbitmq' },
    messages: { type: 'string', default: '10000' },
    'naive-messages': { type: 'string', default: '500' },
    'kill-every-ms': { type: 'string', default: '200' },
    'crash-loops': { type: 'string' },
  },
});
const broker = values.consumer;
if (broker !== 'rabbitmq' && broker !== 'nats') {
  console.error('--consumer takes rabbitmq or nats');
  process.exit(2);
}
const databaseUrl = process.env.DATABASE_URL;
if (!databaseUrl) {
  console.error('DATABASE_URL is required');
  process.exit(2);
}
const messages = Number(values.messages);
const crashLoops = Number(values['crash-loops'] ?? Math.max(5, Math.round(messages / 100)));
const idem = await runConsumerChaos({
  databaseUrl,
  mode: 'idem',
  broker,
  messages,
  crashLoops,
  killEveryMs: Number(values['kill-every-ms']),
  timeoutMs: 3_600_000,
});
const naive = await runConsumerChaos({ databaseUrl, mode: 'naive', messages: Number(values['naive-messages']), timeoutMs: 600_000 });
const cell = (x: { duplicated: number; missing: number }) => `${x.duplicated} / ${x.missing}`;
console.log(
  '| run | broker | messages × copies | crash loops | kills | freezes | seconds | invoices dup / lost | PSP charges dup / lost | outbox events dup / lost | dead-lettered: crash loops / others | most runs of a crash loop |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|');
console.log(
  `| idem | ${broker} | ${idem.messages} × 2 | ${crashLoops} | ${idem.kills} | ${idem.freezes} | ${idem.seconds.toFixed(0)} | ${cell(idem.invoices)} | ${cell(idem.charges)} | ${cell(idem.outbox)} | ${idem.deadLettered.crashLoops} / ${idem.deadLettered.others} | ${idem.crashLoopRuns} |`,
);
console.log(
  `| naive | rabbitmq | ${naive.messages} × 2 | 0 | 0 | 0 | ${naive.seconds.toFixed(0)} | ${cell(naive.invoices)} | ${cell(naive.charges)} | (published directly) | 0 / 0 | |`,
);
const ok =
  idem.finished &&
  [idem.invoices, idem.charges, idem.outbox].every((x) => x.duplicated === 0 && x.missing === 0) &&
  idem.deadLettered.crashLoops === crashLoops &&
  idem.crashLoopRuns <= 5 &&
  idem.history?.ok !== false &&
  naive.invoices.duplicated > 0;
process.exit(ok ? 0 : 1);
