#!/usr/bin/env bash
# The examples as users run them (issue 25), called by scripts/check-pack.sh with its scratch
# project, which installed the packed tarball (never this repository's src/):
#   - links the frameworks, drivers and brokers' clients with their own type packages
#     (@types/aws-lambda, @types/express, @types/koa, fastify, @nestjs/*, next, @middy/core,
#     hono, pg, ioredis, amqplib, @nats-io/* ...) from this repository's node_modules, which
#     `npm ci` filled (nothing more is downloaded);
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

# Every other package `npm ci` installed here (frameworks, drivers, type packages, tsx), as a
# user's project would have installed what its examples import; idem itself stays the tarball's.
for dir in "$ROOT"/node_modules/* "$ROOT"/node_modules/@*/*; do
  name=${dir#"$ROOT/node_modules/"}
  case "$name" in .* | @*/.* | idem) continue ;; @*/*) ;; @*) continue ;; esac
  [ -e "$APP/node_modules/$name" ] && continue
  mkdir -p "$(dirname "$APP/node_modules/$name")"
  ln -s "$dir" "$APP/node_modules/$name"
done

# Every example (what git tracks or would track: not Next's build output), and their driver.
git -C "$ROOT" ls-files --cached --others --exclude-standard examples | tar -C "$ROOT" -cf - -T - | tar -C "$APP" -xf -
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
  "include": ["examples/**/*.ts", "examples-run.ts", "cloudflare-workers.d.ts"]
}
JSON

echo "== type-check the examples: tsc --strict, NodeNext, with the frameworks' own type packages"
(cd "$APP" && node node_modules/typescript/bin/tsc -p tsconfig.examples.json --listFilesOnly | grep -c "/examples/" | xargs -I{} echo "{} example files")
(cd "$APP" && node node_modules/typescript/bin/tsc -p tsconfig.examples.json)

echo "== run the examples: replay, 422 for another body, one effect for concurrent duplicates"
# tsx compiles the NestJS decorators as tsc does (experimentalDecorators) from this tsconfig.
(cd "$APP" && TSX_TSCONFIG_PATH=tsconfig.examples.json node --import tsx examples-run.ts)
