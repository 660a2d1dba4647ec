#!/usr/bin/env bash
# The package as users get it: `npm pack`, then publint and are-the-types-wrong on the tarball,
# then a scratch project in a temporary directory that installs the tarball (offline, from the
# npm cache) with the optional peers linked from this repository's node_modules, and
#   - imports every subpath of package.json `exports` at run time and serves one request twice
#     through idem on PGlite (scripts/pack/smoke.mjs),
#   - type-checks a file that uses each subpath under strict NodeNext, skipLibCheck off
#     (scripts/pack/usage.ts), and the uses typed by frameworks whose own .d.ts fail that check
#     with skipLibCheck on (scripts/pack/usage-frameworks.ts), and the README's Lambda handlers and
#     Express route with @types/aws-lambda and @types/express installed (scripts/pack/usage-typed-apps.ts),
#   - installs the tarball as a user would (npm install ./idem-x.y.z.tgz) and fails on an npm
#     install-scripts warning that names idem (the build runs in prepack, never at install),
#   - runs the `idem` executable with none of the CLI's libraries installed,
#   - copies examples/ in, type-checks each with the frameworks' own type packages and runs it
#     (scripts/pack/examples.sh: replay, 422 for another body, one effect under duplicates).
# Usage: scripts/check-pack.sh (npm run check:pack). Leaves nothing behind.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mktemp -d "${TMPDIR:-/tmp}/idem-pack.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "== npm pack"
npm pack --silent --pack-destination "$WORK" >/dev/null
TARBALL=$(ls "$WORK"/idem-*.tgz)
echo "$TARBALL ($(tar tzf "$TARBALL" | wc -l) files)"

echo "== publint"
npx --no-install publint run --strict "$TARBALL"

echo "== are-the-types-wrong (ESM only: CommonJS and node10 resolution are not supported)"
npx --no-install attw --profile esm-only --no-emoji --no-color "$TARBALL"

echo "== README links: into the package, or absolute (the registry page has no repository files)"
tar xzf "$TARBALL" -O package/README.md | node -e '
  const files = new Set(process.argv.slice(1).map((f) => f.replace(/^package\//, "")));
  const readme = require("node:fs").readFileSync(0, "utf8");
  const dead = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1])
    .filter((t) => !/^(https?:|mailto:|#)/.test(t)).filter((t) => !files.has(t.split("#")[0]));
  if (dead.length) { console.error("check-pack: README links outside the package: " + dead.join(", ")); process.exit(1); }
  console.log("every relative README link is in the package");
' $(tar tzf "$TARBALL")

echo "== scratch project"
APP="$WORK/app"
mkdir -p "$APP"
cat >"$APP/package.json" <<'JSON'
{ "name": "idem-pack-check", "private": true, "type": "module" }
JSON
# idem's runtime dependencies, as the tarball declares them. None of the CLI's libraries, no
# browser-only package, no driver or framework: those are optional peers or bundled.
DEPS=$(tar xzf "$TARBALL" -O package/package.json | node -e '
  const pkg = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
  console.log(Object.keys(pkg.dependencies ?? {}).join(" "));')
echo "runtime dependencies: $DEPS"
for dep in $DEPS; do
  case "$dep" in
    commander | cli-progress | ms | idb-keyval | write-file-atomic | pg | postgres | @electric-sql/pglite | hono | express | \
      fastify | koa | next | @nestjs/* | rxjs | reflect-metadata | @middy/* | redis | @redis/* | ioredis | mysql2 | @opentelemetry/*)
      echo "check-pack: $dep must not be a runtime dependency" >&2
      exit 1
      ;;
  esac
done
# Offline: the tarball, and its dependencies from this repository's node_modules (npm links a
# directory; --ignore-scripts keeps it from running their build scripts).
# shellcheck disable=SC2086
(cd "$APP" && npm install --offline --ignore-scripts --no-audit --no-fund --silent "$TARBALL" \
  $(for dep in $DEPS; do printf '%s ' "$ROOT/node_modules/$dep"; done))

echo "== install as a user would: no install script of idem's (npm 11 warns of each one)"
# No --ignore-scripts and no --silent here: npm lists every package whose install scripts it would
# run (or, on npm 11, holds back). The build runs in prepack, so idem must not be among them.
PLAIN="$WORK/plain"
mkdir -p "$PLAIN"
cat >"$PLAIN/package.json" <<'JSON'
{ "name": "idem-install-check", "private": true, "type": "module" }
JSON
# Its dependencies from the npm cache (npm ci filled it), not linked: npm would run their scripts.
# --prefer-offline, not --offline: npm ci caches the tarballs but not the registry's package
# documents that a plain install resolves versions from; those come from the registry once.
INSTALL_LOG=$(cd "$PLAIN" && npm install --prefer-offline --no-audit --no-fund "$TARBALL" 2>&1) || {
  echo "$INSTALL_LOG" >&2
  exit 1
}
if grep -iE "idem@[0-9].*(prepare|preinstall|install|postinstall)" <<<"$INSTALL_LOG"; then
  echo "check-pack: installing the tarball runs (or warns of) an install script of idem's:" >&2
  echo "$INSTALL_LOG" >&2
  exit 1
fi
echo "no install script of idem's"

echo "== the idem executable without the CLI's libraries"
(cd "$APP" && npx --no-install idem --version && npx --no-install idem --help >/dev/null)

echo "== the client stores without their optional peers: a typed error, not a crash at import"
(cd "$APP" && node --input-type=module -e '
  import assert from "node:assert/strict";
  import { FileIntentStore, IndexedDbIntentStore, MissingDependencyError } from "idem/client/node";
  const intent = { key: "k", method: "POST", url: "http://local/", headers: [], body: null, createdAt: 0, attempts: 0, state: "pending", updatedAt: 0 };
  const dir = (await import("node:fs")).mkdtempSync((await import("node:os")).tmpdir() + "/idem-pack-");
  for (const [store, dependency] of [[new FileIntentStore({ dir }), "write-file-atomic"], [new IndexedDbIntentStore(), "idb-keyval"]]) {
    await assert.rejects(store.put(intent), (error) =>
      error instanceof MissingDependencyError && error.code === "IDEM_MISSING_DEPENDENCY" && error.dependency === dependency);
  }
  console.log("MissingDependencyError for write-file-atomic and idb-keyval");
')

echo "== idem/otel without @opentelemetry/api: a typed error from openTelemetry(), not a crash at import"
(cd "$APP" && node --input-type=module -e '
  import assert from "node:assert/strict";
  import { openTelemetry } from "idem/otel";
  await assert.rejects(openTelemetry(), (error) => error.code === "IDEM_MISSING_DEPENDENCY" && error.dependency === "@opentelemetry/api");
  console.log("MissingDependencyError for @opentelemetry/api");
')

# The optional peers a user would install, plus types and the compiler, linked from this repo.
for peer in @aws-sdk/client-dynamodb @aws-sdk/client-sqs pg postgres mysql2 better-sqlite3 @libsql/client kysely drizzle-orm @electric-sql/pglite hono @hono/node-server express idb-keyval write-file-atomic @opentelemetry/api \
  fastify koa @nestjs/common @nestjs/core rxjs reflect-metadata next @middy/core undici jose yaml \
  @types/node @types/pg @types/better-sqlite3 @types/express @types/koa @types/write-file-atomic @types/aws-lambda typescript; do
  mkdir -p "$(dirname "$APP/node_modules/$peer")"
  ln -s "$ROOT/node_modules/$peer" "$APP/node_modules/$peer"
done

cp scripts/pack/smoke.mjs scripts/pack/usage.ts scripts/pack/usage-frameworks.ts scripts/pack/usage-typed-apps.ts "$APP/"
# `cloudflare:workers`, which idem/cloudflare/object extends, as a Worker's `wrangler types` declares it.
cp src/cloudflare/cloudflare-workers.d.ts "$APP/"
cat >"$APP/tsconfig.json" <<'JSON'
{
  "compilerOptions": {
    "target": "ES2022",
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "lib": ["ES2022", "DOM"],
    "types": ["node"],
    "strict": true,
    "noEmit": true,
    "skipLibCheck": false,
    "verbatimModuleSyntax": true
  },
  "files": ["usage.ts", "cloudflare-workers.d.ts"]
}
JSON
# Framework-typed uses whose framework .d.ts fail with skipLibCheck off (see the file's header):
# the same options with skipLibCheck on. idem's own .d.ts are checked strictly above, through
# usage.ts, which imports every subpath.
cat >"$APP/tsconfig.frameworks.json" <<'JSON'
{
  "extends": "./tsconfig.json",
  "compilerOptions": { "skipLibCheck": true },
  "files": ["usage-frameworks.ts", "usage-typed-apps.ts"]
}
JSON

echo "== import every subpath at run time"
(cd "$APP" && node smoke.mjs)

echo "== type-check a file that uses every subpath"
# Every subpath in package.json exports must appear in usage.ts.
node -e '
  const exportsMap = require(process.argv[1]).exports;
  const usage = require("node:fs").readFileSync(process.argv[2], "utf8");
  const missing = Object.keys(exportsMap).filter((k) => k !== "./package.json")
    .map((k) => (k === "." ? "idem" : "idem/" + k.slice(2)))
    .filter((spec) => !usage.includes(`from '"'"'${spec}'"'"'`));
  if (missing.length) { console.error("check-pack: scripts/pack/usage.ts does not use " + missing.join(", ")); process.exit(1); }
' "$ROOT/package.json" "$APP/usage.ts"
(cd "$APP" && node node_modules/typescript/bin/tsc -p tsconfig.json)
echo "== type-check the framework-typed uses (Koa app, Middy, NextRequest; Lambda handlers as @types/aws-lambda's, Express with @types/express), skipLibCheck on for their .d.ts"
(cd "$APP" && node node_modules/typescript/bin/tsc -p tsconfig.frameworks.json)

# The examples installed as a user would: type-checked with the frameworks' own type packages
# and run (replay, 422, one effect under concurrent duplicates).
started=$(date +%s)
scripts/pack/examples.sh "$APP" "$ROOT"
echo "examples checked in $(($(date +%s) - started)) s"

echo "check-pack: ok"
