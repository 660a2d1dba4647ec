#!/usr/bin/env bash
# The runtime matrix's portable part (npm run test:runtimes, run by .ci/run): idem packed as users
# get it, installed in a scratch project, then test/runtimes/suite.mjs on Node 22, 24 and 26, Bun
# and Deno (replays, mismatches, concurrent duplicates on memory, PostgreSQL through pg and
# postgres.js, Redis; a SIGKILL crash drill), and test/runtimes/workerd.mjs on workerd through
# Miniflare (the fetch adapter on the memory store, the Durable Objects store and the D1 store). The runtimes are the npm packages pinned in
# .ci/runtimes/package.json, installed there on first use. DATABASE_URL and REDIS_URL name the
# services; without them those checks say they are skipped.
# Usage: scripts/runtimes.sh [node22 node24 node26 bun deno workerd]   (default: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RT="$ROOT/.ci/runtimes/node_modules"
[ -x "$RT/node24/bin/node" ] && [ -x "$RT/.bin/bun" ] && [ -x "$RT/.bin/deno" ] && [ -d "$RT/miniflare" ] && [ -d "$RT/esbuild" ] ||
  (cd .ci/runtimes && npm ci --no-audit --no-fund --loglevel=error)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/idem-runtimes.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
npm pack --silent --pack-destination "$WORK" >/dev/null
TARBALL=$(ls "$WORK"/idem-*.tgz)
APP="$WORK/app"
mkdir -p "$APP"
cat >"$APP/package.json" <<'JSON'
{ "name": "idem-runtimes", "private": true, "type": "module" }
JSON
DEPS=$(tar xzf "$TARBALL" -O package/package.json | node -e '
  const pkg = JSON.parse(require("node:fs").readFileSync(0, "utf8"));
  console.log(Object.keys(pkg.dependencies ?? {}).join(" "));')
# shellcheck disable=SC2086
(cd "$APP" && npm install --offline --ignore-scripts --no-audit --no-fund --silent "$TARBALL" \
  $(for dep in $DEPS; do printf '%s ' "$ROOT/node_modules/$dep"; done))
for peer in hono @hono/node-server pg postgres @redis/client; do
  mkdir -p "$(dirname "$APP/node_modules/$peer")"
  ln -s "$ROOT/node_modules/$peer" "$APP/node_modules/$peer"
done
cp test/runtimes/*.mjs examples/workers/worker.ts examples/workers/durable-object.ts examples/workers/d1.ts "$APP/"

runtimes=("$@")
[ ${#runtimes[@]} -gt 0 ] || runtimes=(node22 node24 node26 bun deno workerd)
failed=()
for rt in "${runtimes[@]}"; do
  echo "== $rt"
  case "$rt" in
    node22 | node24 | node26) run=("$RT/$rt/bin/node" suite.mjs) ;;
    bun) run=("$RT/.bin/bun" suite.mjs) ;;
    deno) run=("$RT/.bin/deno" run -A suite.mjs) ;;
    workerd) run=(node workerd.mjs "$RT/miniflare" "$RT/esbuild") ;;
    *) echo "unknown runtime $rt" >&2; exit 2 ;;
  esac
  (cd "$APP" && PATH="$(dirname "${run[0]}"):$PATH" "${run[@]}") || failed+=("$rt")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "runtimes failed: ${failed[*]}" >&2
  exit 1
fi
echo "every runtime passed: ${runtimes[*]}"
