#!/usr/bin/env bash
# The examples as users run them (issue 25), called by scripts/check-pack.sh with its scratch
# project, which installed the packed tarball (never this repository's src/):
#   - links the frameworks, drivers and brokers' clients with their own type packages
#     (@types/aws-lambda, @types/express, @types/koa, fastify, @nestjs/*, next, @middy/core,
#     hono, pg, ioredis, amqplib, @nats-io/*) from this repository's node_modules, which `npm ci`
#     filled (nothing more is downloaded);
#   - copies examples/ in, and type-checks every example under `tsc --strict`, module NodeNext,
#     with those type packages (skipLibCheck on: several frameworks' own .d.ts fail without it,
#     see scripts/pack/usage-frameworks.ts; idem's .d.ts are checked with it off by usage.ts);
#   - runs scripts/pack/examples-run.ts with tsx: each example answers the same request twice
#     with a replay, another body with 422, concurrent duplicates with one effect (PGlite; the
#     Redis, RabbitMQ and NATS examples only when REDIS_URL, AMQP_URL, NATS_URL are set).
# Usage: scripts/pack/examples.sh <scratch project> <repository root>
set -euo pipefail
APP=$1
ROOT=$2

for peer in @nestjs/platform-express @nestjs/platform-fastify @koa/bodyparser ioredis amqplib @nats-io/jetstream \
  @nats-io/transport-node tsx; do
  [ -e "$APP/node_modules/$peer" ] && continue
  mkdir -p "$(dirname "$APP/node_modules/$peer")"
  ln -s "$ROOT/node_modules/$peer" "$APP/node_modules/$peer"
done

# The examples of each stack, and the Next route with its store (not the contract harness's
# route under app/h/). Payments, Drizzle, the client demo and the orders consumer are
# type-checked in the repository (npm run typecheck).
mkdir -p "$APP/examples/next/app/api" "$APP/examples/next/lib"
for dir in hono express fastify koa nestjs lambda redis amqp nats shared; do
  cp -R "$ROOT/examples/$dir" "$APP/examples/"
done
cp -R "$ROOT/examples/next/app/api/charges" "$APP/examples/next/app/api/"
cp "$ROOT/examples/next/lib/store.ts" "$APP/examples/next/lib/"
cp "$ROOT/scripts/pack/examples-run.ts" "$APP/"
if grep -rn "src/" "$APP/examples" --include=*.ts | grep -E "from '(\.\./)+src/|import\('(\.\./)+src/"; then
  echo "check-pack: an example imports the repository's src/ instead of idem/..." >&2
  exit 1
fi
cat >"$APP/tsconfig.examples.json" <<'JSON'
{
  "extends": "./tsconfig.json",
  "compilerOptions": {
    "skipLibCheck": true,
    "experimentalDecorators": true,
    "noUncheckedIndexedAccess": true
  },
  "files": [],
  "include": ["examples/**/*.ts", "examples-run.ts"]
}
JSON

echo "== type-check the examples: tsc --strict, NodeNext, with the frameworks' own type packages"
(cd "$APP" && node node_modules/typescript/bin/tsc -p tsconfig.examples.json --listFilesOnly | grep -c "/examples/" | xargs -I{} echo "{} example files")
(cd "$APP" && node node_modules/typescript/bin/tsc -p tsconfig.examples.json)

echo "== run the examples: replay, 422 for another body, one effect for concurrent duplicates"
# tsx compiles the NestJS decorators as tsc does (experimentalDecorators) from this tsconfig.
(cd "$APP" && TSX_TSCONFIG_PATH=tsconfig.examples.json node --import tsx examples-run.ts)
