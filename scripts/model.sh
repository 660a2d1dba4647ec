#!/usr/bin/env bash
# npm run model: model-checks idem's key protocol (docs/model/idem.pml) with spin.
#
# Builds the model in a temporary directory and runs, each exhaustively:
#   - the real model in every fault configuration (safety: every assertion; liveness: the
#     `live` LTL claim under weak fairness), which must report 0 errors;
#   - every mutant (a MUT_* switch: one SQL condition or rule dropped), which must report at
#     least one error, i.e. a counterexample trail.
# Prints one line per run (states stored, transitions, memory, time) and exits 1 when any
# outcome differs. `--write-trails` also rewrites docs/model/trails/ from the mutants' trails.
# Needs spin and gcc on PATH (Debian: apt-get install spin).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
model="$root/docs/model/idem.pml"
trails="$root/docs/model/trails"
write_trails=0
[ "${1:-}" = "--write-trails" ] && write_trails=1

for tool in spin gcc; do
  command -v "$tool" >/dev/null || { echo "model: $tool is not on PATH (apt-get install spin gcc)" >&2; exit 2; }
done

work="$(mktemp -d "${TMPDIR:-/tmp}/idem-model.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Fault budgets (see the README): crashes, thrown errors, rejected requests, stalled workers.
NONE="-DCRASHES=0 -DTHROWS=0 -DREJECTS=0 -DSTALLS=0"
CRASH="-DCRASHES=1 -DTHROWS=0 -DREJECTS=0 -DSTALLS=0"
STALL="-DCRASHES=0 -DTHROWS=0 -DREJECTS=0 -DSTALLS=1"
THROW="-DCRASHES=0 -DTHROWS=1 -DREJECTS=1 -DSTALLS=0"

failures=0
total_states=0

# run NAME MODE EXPECT DEFINES...
#   MODE safety (assertions, invalid end states) or live (acceptance cycles, weak fairness)
#   EXPECT pass (0 errors) or fail (>= 1 error)
run() {
  local name="$1" mode="$2" expect="$3"; shift 3
  local dir="$work/$name"
  mkdir -p "$dir"
  cp "$model" "$dir/idem.pml"
  local started=$SECONDS out errors states transitions memory elapsed verdict
  (
    cd "$dir"
    spin -a "$@" idem.pml >spin.log 2>&1 || { cat spin.log >&2; exit 3; }
    # COLLAPSE: compresses each stored state (about 4x less memory for some more time); the
    # search stays exhaustive (no bitstate hashing).
    if [ "$mode" = safety ]; then
      gcc -O2 -w -DSAFETY -DNOCLAIM -DCOLLAPSE -DMEMLIM=2048 -o pan pan.c
      ./pan -m400000 >pan.out 2>&1 || true
    else
      gcc -O2 -w -DNFAIR=3 -DCOLLAPSE -DMEMLIM=2048 -o pan pan.c
      ./pan -a -f -m400000 >pan.out 2>&1 || true
    fi
  ) || { echo "model: $name: spin or gcc failed" >&2; failures=$((failures + 1)); return; }
  out="$dir/pan.out"
  errors="$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | head -n 1)"
  states="$(awk '/states, stored/ {print $1; exit}' "$out")"
  transitions="$(awk '/transitions \(= / {print $1; exit}' "$out")"
  memory="$(awk '/total actual memory usage/ {print $1; exit}' "$out")"
  elapsed=$((SECONDS - started))
  if [ -z "$errors" ] || grep -q "out of memory\|max search depth too small" "$out"; then
    verdict="INCOMPLETE"
  elif [ "$expect" = pass ] && [ "$errors" = 0 ]; then
    verdict="ok"
  elif [ "$expect" = fail ] && [ "$errors" != 0 ]; then
    verdict="ok (counterexample)"
  else
    verdict="UNEXPECTED"
  fi
  printf '%-34s %-6s errors=%-3s states=%-9s transitions=%-9s memory=%-8sMB %4ss  %s\n' \
    "$name" "$mode" "${errors:-?}" "${states:-?}" "${transitions:-?}" "${memory:-?}" "$elapsed" "$verdict"
  case "$verdict" in ok*) ;; *) failures=$((failures + 1)); sed -n '1,40p' "$out" >&2 ;; esac
  [ -n "$states" ] && [[ "$states" =~ ^[0-9]+$ ]] && total_states=$((total_states + states))
  if [ "$expect" = fail ] && [ -f "$dir/idem.pml.trail" ]; then
    local first
    first="$(grep -m 1 'violated\|acceptance cycle' "$out" | sed 's/ (at depth [0-9]*)//' || true)"
    if [ "$write_trails" = 1 ]; then
      mkdir -p "$trails"
      {
        echo "# $name: spin -t -p -g $* idem.pml (run in the directory of pan's idem.pml.trail)"
        echo "$first"
        (cd "$dir" && spin -t -p -g "$@" idem.pml 2>&1 | grep -E '^ *[0-9]+:[[:space:]]+proc|assertion|violated' | sed 's/ idem.pml:[0-9]* (state [0-9]*)//')
      } >"$trails/$name.txt"
    elif [ -f "$trails/$name.txt" ]; then
      local kept
      kept="$(sed -n 2p "$trails/$name.txt")"
      [ "$kept" = "$first" ] || echo "  note: $name now violates '$first', the kept trail '$kept' (rerun with --write-trails)"
    fi
  fi
}

echo "spin $(spin -V | sed -n 's/Spin Version \([^ ]*\).*/\1/p'), model docs/model/idem.pml"
echo "real model (0 errors expected):"
run real-none        safety pass $NONE
run real-crash       safety pass $CRASH
run real-stall       safety pass $STALL
run real-throw       safety pass $THROW
run real-callfirst-crash safety pass $CRASH -DCALL_FIRST
run live-none        live   pass $NONE
run live-throw       live   pass -DCRASHES=0 -DTHROWS=1 -DREJECTS=0 -DSTALLS=0
run live-reject      live   pass -DCRASHES=0 -DTHROWS=0 -DREJECTS=1 -DSTALLS=0

echo "mutants (a counterexample expected):"
run MUT_NO_FENCE              safety fail $STALL -DMUT_NO_FENCE
run MUT_FINISH_NO_FENCE       safety fail $STALL -DMUT_FINISH_NO_FENCE
run MUT_NO_CAS                safety fail $STALL -DMUT_NO_CAS
run MUT_NO_SWEEP_LEASE        safety fail $NONE  -DMUT_NO_SWEEP_LEASE
run MUT_ORDER                 safety fail $NONE  -DMUT_ORDER
run MUT_REPLAY_FIRST          safety fail $NONE  -DMUT_REPLAY_FIRST
run MUT_ROW_TOKEN             safety fail $STALL -DMUT_ROW_TOKEN
run MUT_REPLACE_KEEPS_REQUEST safety fail $STALL -DMUT_REPLACE_KEEPS_REQUEST
run MUT_COMPLETER_DISCARD_ANY safety fail $CRASH -DCALL_FIRST -DMUT_COMPLETER_DISCARD_ANY

echo "total states stored (all runs): $total_states"
if [ "$failures" -ne 0 ]; then
  echo "model: $failures run(s) with an unexpected outcome" >&2
  exit 1
fi
echo "model: every property holds on the real model; every mutant has a counterexample"
