/**
 * OpenTelemetry for the example, when the environment asks for it: `IDEM_OTEL=console` prints
 * idem's spans as they end and its metrics every `IDEM_OTEL_INTERVAL_MS` (default 10 000) on
 * stdout, through the OTel SDK's console exporters. Names: docs/observability.md. The library
 * itself uses only `@opentelemetry/api`; the SDK is the application's choice (here the SDK
 * packages are devDependencies of the repository).
 */
import * as api from '@opentelemetry/api';
import { type IdempotencyTelemetry, telemetryFrom } from 'idem/otel';

/** The telemetry to give idem, and a function that flushes and stops the SDK; undefined when IDEM_OTEL is unset. */
export async function setupTelemetry(env: NodeJS.ProcessEnv): Promise<{ telemetry: IdempotencyTelemetry; shutdown(): Promise<void> } | undefined> {
  if (!env.IDEM_OTEL) return undefined;
  if (env.IDEM_OTEL !== 'console') throw new Error(`IDEM_OTEL=${env.IDEM_OTEL}: the example knows only IDEM_OTEL=console`);
  const { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
  const { ConsoleMetricExporter, MeterProvider, PeriodicExportingMetricReader } = await import('@opentelemetry/sdk-metrics');
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new ConsoleSpanExporter())] });
  const exportIntervalMillis = Number(env.IDEM_OTEL_INTERVAL_MS ?? 10_000);
  const meterProvider = new MeterProvider({ readers: [new PeriodicExportingMetricReader({ exporter: new ConsoleMetricExporter(), exportIntervalMillis })] });
  api.trace.setGlobalTracerProvider(tracerProvider);
  api.metrics.setGlobalMeterProvider(meterProvider);
  return {
    telemetry: telemetryFrom(api, { tracerProvider, meterProvider }),
    shutdown: async () => {
      await Promise.all([tracerProvider.shutdown(), meterProvider.shutdown()]);
    },
  };
}
