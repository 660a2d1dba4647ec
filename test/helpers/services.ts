/**
 * The services a suite may need and the tier it runs in, decided in one place.
 *
 * Services: each is turned on by its env var and only by it; nothing connects to a default port
 * on its own. `npm test` sets none of them, so it runs on embedded PGlite and the memory store
 * alone; `npm run test:all` (what .ci/run runs) is run with all of them set. A suite that needs
 * a service gates on it with {@link needs}: skipped, in one line naming the variable, when it is
 * not set — never cancelled, never failed for that reason.
 *
 * Tier: `npm test` is the fast tier; `npm run test:all` sets `IDEM_TEST_TIER=all`, the full
 * matrix ({@link fullMatrix}); `npm run test:fast` sets `IDEM_TEST_TIER=fast` (memory store
 * only). A suite that runs only in the full matrix gates with {@link fullMatrixOnly}.
 */

/** Each service's env var and the value .ci/run gives it on this machine. */
export const SERVICES = {
  DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/test',
  REDIS_URL: 'redis://127.0.0.1:6379',
  AMQP_URL: 'amqp://guest:guest@127.0.0.1:5672',
  NATS_URL: 'nats://127.0.0.1:4222',
  CITUS_URL: 'postgres://postgres@127.0.0.1:9700/postgres',
  MYSQL_URL: 'mysql://root@127.0.0.1:3306/test',
} as const;

export type Service = keyof typeof SERVICES;

/** The service's URL from its env var, or undefined when the suite must not use it. */
export function serviceUrl(service: Service): string | undefined {
  return process.env[service] || undefined;
}

/**
 * node:test's `skip` for a suite needing `services`: false when every one is set, else one line
 * naming the variables to set, e.g. `{ skip: needs('AMQP_URL') }` on the suite's `describe`.
 */
export function needs(...services: Service[]): string | false {
  const missing = services.filter((service) => !serviceUrl(service));
  if (missing.length === 0) return false;
  return `set ${missing.map((service) => `${service} (e.g. ${SERVICES[service]})`).join(' and ')} to run this suite; npm run test:all sets it`;
}

/** The full matrix: `npm run test:all` (IDEM_TEST_TIER=all), what .ci/run runs. */
export const fullMatrix: boolean = process.env.IDEM_TEST_TIER === 'all';

/** node:test's `skip` for a suite of the full matrix only: one line saying where it runs. */
export function fullMatrixOnly(): string | false {
  return !fullMatrix && 'runs in the full matrix only: npm run test:all (IDEM_TEST_TIER=all)';
}
