/**
 * The shape of the house (docs/architecture.md, "Layers"), checked by `npm run lint`:
 * no import circle, and each layer imports only the layers below it. Type-only imports count
 * too (`tsPreCompilationDeps`): a circle of types is still a circle to read.
 *
 * Layers, bottom up: core (pure) → store (the interface) → engine → http (the web core) and
 * consumer → the surfaces (framework adapters, broker adapters, Lambda, functions, webhooks).
 * The stores (postgres and its drivers, mysql, redis, dynamodb, memory) sit on store and core only. The
 * CLI sits on top and nothing imports it.
 */

/** The framework and runtime surfaces: each is glue over the HTTP core or the consumer. */
const SURFACES = ['hono', 'express', 'fastify', 'nestjs', 'next', 'lambda', 'koa', 'amqp', 'nats', 'function', 'webhooks', 'mcp', 'ai'];
/** Surfaces that are a thin layer on `idempotent(fn)` (protocol.md K48): they may import src/function, no other surface. */
const FUNCTION_SURFACES = ['mcp', 'ai'];
/** The key of an agent's tool call, neutral of the framework (protocol.md K48): shared by the tool surfaces, on core only. */
const TOOL_CALL = ['tool-call'];
/** The stores and the drivers of PostgresStore. */
const STORES = ['postgres', 'postgresjs', 'kysely', 'prisma', 'drizzle', 'mysql', 'sqlite', 'redis', 'dynamodb', 'memory', 'cloudflare'];
/** What only an application or the CLI puts together. */
const TOOLS = ['cli', 'otel', 'operator', 'openapi', 'client'];

const dirs = (names) => `^src/(${names.join('|')})/`;
/** Anything in src/ outside the given directories. */
const outside = (names) => `^src/(?!(${names.join('|')})/)`;

/** Packages a layer must not name: the optional peers (frameworks, drivers) and dev tools. */
const DRIVER_OR_FRAMEWORK = ['npm-peer', 'npm-dev', 'npm-optional', 'npm-no-pkg', 'npm-unknown'];

module.exports = {
  forbidden: [
    {
      name: 'no-circular',
      severity: 'error',
      comment: 'An import circle: split out what both files need (issue 39, "the shape of the house").',
      from: {},
      to: { circular: true },
    },
    {
      name: 'core-is-pure',
      severity: 'error',
      comment: 'src/core imports only src/core: no store, engine, HTTP or framework.',
      from: { path: '^src/core/' },
      to: { path: outside(['core']) },
    },
    {
      name: 'store-interface-on-core',
      severity: 'error',
      comment: 'src/store (the IdempotencyStore interface and store-neutral code) imports only src/core and itself.',
      from: { path: '^src/store/' },
      to: { path: outside(['core', 'store']) },
    },
    {
      name: 'engine-names-no-http',
      severity: 'error',
      comment: 'The engine sits on the store interface and core: no HTTP, no surface, no concrete store.',
      from: { path: '^src/engine/' },
      to: { path: outside(['core', 'store', 'engine']) },
    },
    {
      name: 'http-core-names-no-framework',
      severity: 'error',
      comment: 'The HTTP core sits on the engine: no framework adapter, consumer or concrete store.',
      from: { path: '^src/http/' },
      to: { path: outside(['core', 'store', 'engine', 'http']) },
    },
    {
      name: 'consumer-names-no-broker',
      severity: 'error',
      comment: 'The consumer sits on the engine: no broker, no HTTP, no concrete store.',
      from: { path: '^src/consumer/' },
      to: { path: outside(['core', 'store', 'engine', 'consumer']) },
    },
    {
      name: 'lower-layers-name-no-driver',
      severity: 'error',
      comment: 'core, store, engine, the HTTP core and the consumer import no framework, driver or dev package.',
      from: { path: dirs(['core', 'store', 'engine', 'http', 'consumer']) },
      to: { dependencyTypes: DRIVER_OR_FRAMEWORK },
    },
    {
      name: 'stores-do-not-import-up',
      severity: 'error',
      comment: 'A store knows its database and the store interface, never the engine, the HTTP core or a surface.',
      from: { path: dirs(STORES) },
      to: { path: dirs(['engine', 'http', 'consumer', ...SURFACES, ...TOOLS]) },
    },
    {
      name: 'surfaces-do-not-import-stores',
      severity: 'error',
      comment: 'A surface is glue over the HTTP core or the consumer: it names no store and no tool.',
      from: { path: dirs(SURFACES) },
      to: { path: dirs([...STORES, ...TOOLS]) },
    },
    {
      name: 'surfaces-do-not-import-each-other',
      severity: 'error',
      comment: 'One surface does not build on another: share through src/http or src/consumer.',
      from: { path: `^src/(${SURFACES.filter((s) => !FUNCTION_SURFACES.includes(s)).join('|')})/`, pathNot: '^src/lambda/durable\\.ts$' },
      to: { path: dirs(SURFACES), pathNot: '^src/$1/' },
    },
    {
      name: 'lambda-durable-builds-on-function-only',
      severity: 'error',
      comment: 'Durable functions (protocol.md K54) are idempotent functions held across replays: src/lambda/durable.ts imports src/function and no other surface.',
      from: { path: '^src/lambda/durable\\.ts$' },
      to: { path: dirs(SURFACES), pathNot: ['^src/lambda/', '^src/function/'] },
    },
    {
      name: 'function-surfaces-build-on-function-only',
      severity: 'error',
      comment: 'A tool surface is a thin layer on idempotent(fn): it imports src/function and no other surface.',
      from: { path: `^src/(${FUNCTION_SURFACES.join('|')})/` },
      to: { path: dirs(SURFACES), pathNot: ['^src/$1/', '^src/function/'] },
    },
    {
      name: 'tool-call-keys-on-core',
      severity: 'error',
      comment: 'src/tool-call (the tool surfaces\' shared key) imports only src/core: no engine, surface or framework.',
      from: { path: dirs(TOOL_CALL) },
      to: { path: outside(['core', ...TOOL_CALL]) },
    },
    {
      name: 'nothing-imports-the-cli',
      severity: 'error',
      comment: 'src/cli is the top: only src/cli imports it.',
      from: { pathNot: '^src/cli/' },
      to: { path: '^src/cli/' },
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      comment: 'An import that resolves to nothing (but the workerd module the Durable Object class extends, src/cloudflare/object.ts).',
      from: {},
      to: { couldNotResolve: true, pathNot: '^cloudflare:workers$' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
      mainFields: ['module', 'main', 'types', 'typings'],
    },
  },
};
