/**
 * idem/otel: spans and metrics of every outcome (docs/observability.md), collected with the
 * OpenTelemetry SDK's in-memory span exporter and a pull metric reader, on PGlite.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { PGlite } from '@electric-sql/pglite';
import { pglite } from './helpers/pglite.js';
import * as api from '@opentelemetry/api';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { LeaseLostError } from '../src/core/errors.js';
import { IdempotencyEngine } from '../src/engine/engine.js';
import { ReplayCache } from '../src/engine/replay-cache.js';
import { HttpIdempotency } from '../src/http/idempotency.js';
import { openTelemetry, telemetryFrom } from '../src/otel/index.js';
import type { Queryable } from '../src/postgres/client.js';
import { PostgresStore } from '../src/postgres/index.js';
import type { IdempotencyStore } from '../src/store/types.js';

class PullReader extends MetricReader {
  protected async onShutdown(): Promise<void> {}
  protected async onForceFlush(): Promise<void> {}
}

const fp = (text: string) => createHash('sha256').update(text).digest();
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
const response = (status = 201) => ({ status, headers: [] as Array<[string, string]>, body: new TextEncoder().encode('{"ok":true}') });

describe('idem/otel (docs/observability.md)', () => {
  let db: PGlite;
  let store: PostgresStore;
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const reader = new PullReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  const telemetry = telemetryFrom(api, { tracerProvider, meterProvider });

  before(async () => {
    db = pglite();
    store = new PostgresStore({ client: db, table: 'otel_keys', notify: true });
    await store.migrate();
  });
  after(async () => {
    await meterProvider.shutdown();
    await db.close();
  });
  beforeEach(() => spans.reset());

  async function outcomes(): Promise<Map<string, number>> {
    const { resourceMetrics } = await reader.collect();
    const counts = new Map<string, number>();
    for (const scope of resourceMetrics.scopeMetrics) {
      for (const metric of scope.metrics) {
        if (metric.descriptor.name !== 'idem.outcomes') continue;
        for (const point of metric.dataPoints) counts.set(String(point.attributes['idem.outcome']), point.value as number);
      }
    }
    return counts;
  }
  async function metric(name: string) {
    const { resourceMetrics } = await reader.collect();
    return resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === name);
  }
  const requestSpans = () => spans.getFinishedSpans().filter((s) => s.name === 'idem.request');
  const lastRequest = () => requestSpans().at(-1)!;
  const childrenOf = (parent: ReadableSpan) => spans.getFinishedSpans().filter((s) => s.parentSpanContext?.spanId === parent.spanContext().spanId);

  test('created: a request span with its phase, call and finish as child spans; claim and execution histograms; in-flight back to 0', async () => {
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry });
    const begun = await engine.begin({ scope: 's', key: 'created-1', fingerprint: fp('a') });
    assert.equal(begun.kind, 'execute');
    if (begun.kind !== 'execute') return;
    assert.equal(((await metric('idem.executions.active'))?.dataPoints[0]?.value as number) ?? 0, 1, 'one execution in flight');
    await begun.execution.phase('order_created', async (tx) => (await tx.query('SELECT 1')).rows.length);
    await begun.execution.call('psp_charged', async (derivedKey) => ({ id: derivedKey.slice(0, 8) }));
    await begun.execution.finish(response());
    const request = lastRequest();
    assert.equal(request.attributes['idem.outcome'], 'created');
    assert.equal(request.attributes['idem.execution.end'], 'finished');
    assert.equal(request.attributes['idem.key'], 'created-1');
    assert.equal(typeof request.attributes['idem.token'], 'number');
    assert.deepEqual(
      childrenOf(request).map((s) => s.name),
      ['idem.phase order_created', 'idem.call psp_charged', 'idem.finish'],
    );
    assert.equal((await metric('idem.executions.active'))?.dataPoints[0]?.value, 0, 'none in flight after the finish');
    const claim = await metric('idem.claim.duration');
    assert.equal(claim?.descriptor.unit, 's');
    assert.ok(((claim?.dataPoints[0]?.value as { count: number } | undefined)?.count ?? 0) >= 1);
    const execution = await metric('idem.execution.duration');
    assert.ok(execution?.dataPoints.some((p) => p.attributes['idem.execution.end'] === 'finished'));
    assert.ok((await outcomes()).get('created')! >= 1);
  });

  test('replayed, mismatch and in_progress end the request span at once', async () => {
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry });
    const first = await engine.begin({ scope: 's', key: 'r-1', fingerprint: fp('a') });
    if (first.kind === 'execute') await first.execution.finish(response());
    assert.equal((await engine.begin({ scope: 's', key: 'r-1', fingerprint: fp('a') })).kind, 'replay');
    assert.equal(lastRequest().attributes['idem.outcome'], 'replayed');
    assert.equal((await engine.begin({ scope: 's', key: 'r-1', fingerprint: fp('b') })).kind, 'mismatch');
    assert.equal(lastRequest().attributes['idem.outcome'], 'mismatch');
    const held = await engine.begin({ scope: 's', key: 'r-2', fingerprint: fp('a') });
    assert.equal((await engine.begin({ scope: 's', key: 'r-2', fingerprint: fp('a') })).kind, 'in-progress');
    assert.equal(lastRequest().attributes['idem.outcome'], 'in_progress');
    if (held.kind === 'execute') await held.execution.finish(response());
    const counts = await outcomes();
    for (const name of ['replayed', 'mismatch', 'in_progress']) assert.ok(counts.get(name)! >= 1, name);
  });

  test('a replay or mismatch decided from the replay cache carries idem.cache_hit, on the span and the counter', async () => {
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry, replayCache: new ReplayCache() });
    const first = await engine.begin({ scope: 's', key: 'cache-1', fingerprint: fp('a') });
    if (first.kind === 'execute') await first.execution.finish(response());
    assert.equal((await engine.begin({ scope: 's', key: 'cache-1', fingerprint: fp('a') })).kind, 'replay');
    assert.equal(lastRequest().attributes['idem.outcome'], 'replayed');
    assert.equal(lastRequest().attributes['idem.cache_hit'], true);
    assert.equal((await engine.begin({ scope: 's', key: 'cache-1', fingerprint: fp('b') })).kind, 'mismatch');
    assert.equal(lastRequest().attributes['idem.cache_hit'], true);
    const plain = new IdempotencyEngine<Queryable>({ store, telemetry });
    assert.equal((await plain.begin({ scope: 's', key: 'cache-1', fingerprint: fp('a') })).kind, 'replay');
    assert.equal(lastRequest().attributes['idem.cache_hit'], undefined, 'a replay read from the store has none');
    const points = (await metric('idem.outcomes'))!.dataPoints;
    const hits = (outcome: string) => points.find((p) => p.attributes['idem.outcome'] === outcome && p.attributes['idem.cache_hit'] === true)?.value;
    assert.equal(hits('replayed'), 1);
    assert.equal(hits('mismatch'), 1);
  });

  test('waited: a duplicate that waited for the result, with idem.waited_ms', async () => {
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry, inProgress: { wait: 10_000 } });
    const first = await engine.begin({ scope: 's', key: 'w-1', fingerprint: fp('a') });
    const waiting = engine.begin({ scope: 's', key: 'w-1', fingerprint: fp('a') });
    await sleep(50);
    if (first.kind === 'execute') await first.execution.finish(response());
    assert.equal((await waiting).kind, 'replay');
    const waited = requestSpans().find((s) => s.attributes['idem.outcome'] === 'waited');
    assert.ok(waited && (waited.attributes['idem.waited_ms'] as number) > 0);
    assert.ok((await outcomes()).get('waited')! >= 1);
  });

  test('released, then taken_over by the retry; failed_permanently for a stored 5xx', async () => {
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry });
    const first = await engine.begin({ scope: 's', key: 't-1', fingerprint: fp('a') });
    if (first.kind === 'execute') {
      await first.execution.phase('one', async () => 1);
      await first.execution.release();
    }
    assert.equal(lastRequest().attributes['idem.execution.end'], 'released');
    assert.equal(lastRequest().attributes['idem.execution.outcome'], 'released');
    const retry = await engine.begin({ scope: 's', key: 't-1', fingerprint: fp('a') });
    assert.equal(retry.kind, 'execute');
    if (retry.kind === 'execute') await retry.execution.finish(response(500));
    const request = lastRequest();
    assert.equal(request.attributes['idem.outcome'], 'taken_over');
    assert.equal(request.attributes['idem.execution.outcome'], 'failed_permanently');
    const counts = await outcomes();
    for (const name of ['released', 'taken_over', 'failed_permanently']) assert.ok(counts.get(name)! >= 1, name);
  });

  test('fenced: a worker whose lease was taken over fails its next phase; its span has status ERROR', async () => {
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry, leaseMs: 150, heartbeatMs: 0, retentionMs: 60_000 });
    const stale = await engine.begin({ scope: 's', key: 'f-1', fingerprint: fp('a') });
    await sleep(250);
    const fresh = await engine.begin({ scope: 's', key: 'f-1', fingerprint: fp('a') });
    assert.equal(fresh.kind, 'execute');
    if (stale.kind === 'execute')
      await assert.rejects(
        stale.execution.phase('late', async () => 1),
        LeaseLostError,
      );
    const fenced = requestSpans().find((s) => s.attributes['idem.execution.end'] === 'fenced');
    assert.ok(fenced);
    assert.equal(fenced.status.code, api.SpanStatusCode.ERROR);
    const late = childrenOf(fenced).find((s) => s.name === 'idem.phase late');
    assert.equal(late?.status.code, api.SpanStatusCode.ERROR);
    if (fresh.kind === 'execute') await fresh.execution.finish(response());
    assert.ok((await outcomes()).get('fenced')! >= 1);
  });

  test('store_unavailable: the store throws; 503 over HTTP; the span has status ERROR', async () => {
    const broken = {
      claim: async () => {
        throw new Error('connection refused');
      },
    } as unknown as IdempotencyStore<Queryable>;
    const http = new HttpIdempotency<Queryable>({ store: broken, telemetry });
    const res = await http.handle(
      new Request('http://api.test/v1/x', { method: 'POST', headers: { 'idempotency-key': 'u-1' }, body: '{}' }),
      async () => new Response('never'),
    );
    assert.equal(res.status, 503);
    const request = lastRequest();
    assert.equal(request.attributes['idem.outcome'], 'store_unavailable');
    assert.equal(request.status.code, api.SpanStatusCode.ERROR);
    assert.ok((await outcomes()).get('store_unavailable')! >= 1);
  });

  test('every outcome named in docs/observability.md was counted above', async () => {
    const counts = await outcomes();
    const all = ['created', 'replayed', 'in_progress', 'waited', 'mismatch', 'taken_over', 'fenced', 'released', 'failed_permanently', 'store_unavailable'];
    assert.deepEqual(
      all.filter((name) => !(counts.get(name)! >= 1)),
      [],
    );
  });

  test('openTelemetry() loads @opentelemetry/api itself and uses the global providers (no-op without an SDK)', async () => {
    const global = await openTelemetry();
    const engine = new IdempotencyEngine<Queryable>({ store, telemetry: global });
    const begun = await engine.begin({ scope: 's', key: 'g-1', fingerprint: fp('a') });
    assert.equal(begun.kind, 'execute');
    if (begun.kind === 'execute') await begun.execution.finish(response());
    assert.equal(spans.getFinishedSpans().length, 0, 'nothing reaches this test SDK through the unset global provider');
  });
});
