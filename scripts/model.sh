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
case "${1:-}" in
  "") ;;
  --write-trails) write_trails=1 ;;
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "model: unknown argument ${1} (usage: npm run model [-- --write-trails])" >&2; exit 2 ;;
esac

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
# A handler that kills its process on every attempt (protocol.md K23), with or without a stall.
LOOP="-DCRASHES=0 -DTHROWS=0 -DREJECTS=0 -DSTALLS=0 -DCRASH_LOOP"
LOOP_STALL="-DCRASHES=0 -DTHROWS=0 -DREJECTS=0 -DSTALLS=1 -DCRASH_LOOP"

# Runs go two at a time (MODEL_JOBS); each writes its line to $work/<name>.line.
jobs_max="${MODEL_JOBS:-2}"
order=()

# spawn NAME MODE EXPECT DEFINES...: `run` in the background, at most $jobs_max at once.
spawn() {
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  order+=("$1")
  run "$@" &
}

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
    # COLLAPSE: compresses each stored state (less memory for some more time); the search
    # stays exhaustive (no bitstate hashing). -O0: gcc -O2 takes about 30 s per verifier on a
    # loaded machine, -O0 about 5 s, and the searches are short.
    if [ "$mode" = safety ]; then
      gcc -O0 -w -DSAFETY -DNOCLAIM -DCOLLAPSE -DMEMLIM=2048 -o pan pan.c
      ./pan -m400000 >pan.out 2>&1 || true
    else
      gcc -O0 -w -DNFAIR=3 -DCOLLAPSE -DMEMLIM=2048 -o pan pan.c
      ./pan -a -f -m400000 >pan.out 2>&1 || true
    fi
  ) || { echo "$name: spin or gcc failed" >"$work/$name.line"; return; }
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
  printf '%-26s %-6s errors=%-3s states=%-9s transitions=%-9s memory=%-8sMB %4ss  %s\n' \
    "$name" "$mode" "${errors:-?}" "${states:-?}" "${transitions:-?}" "${memory:-?}" "$elapsed" "$verdict" >"$work/$name.line"
  case "$verdict" in ok*) ;; *) sed -n '1,40p' "$out" >>"$work/$name.line" ;; esac
  echo "${states:-0}" >"$work/$name.states"
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
      [ "$kept" = "$first" ] || echo "  note: $name now violates '$first', the kept trail '$kept' (rerun with --write-trails)" >>"$work/$name.line"
    fi
  fi
}

echo "spin $(spin -V | sed -n 's/Spin Version \([^ ]*\).*/\1/p'), model docs/model/idem.pml, $jobs_max runs at a time"
started_all=$SECONDS
spawn real-none            safety pass $NONE
spawn real-crash           safety pass $CRASH
spawn real-stall           safety pass $STALL
spawn real-throw           safety pass $THROW
spawn real-callfirst-crash safety pass $CRASH -DCALL_FIRST
spawn real-callfirst-stall safety pass $STALL -DCALL_FIRST
spawn live-none            live   pass $NONE
spawn live-throw           live   pass -DCRASHES=0 -DTHROWS=1 -DREJECTS=0 -DSTALLS=0
spawn live-reject          live   pass -DCRASHES=0 -DTHROWS=0 -DREJECTS=1 -DSTALLS=0
spawn real-crashloop       safety pass $LOOP
spawn real-crashloop-stall safety pass $LOOP_STALL
spawn live-crashloop       live   pass $LOOP
spawn MUT_NO_FENCE              safety fail $STALL -DMUT_NO_FENCE
spawn MUT_FINISH_NO_FENCE       safety fail $STALL -DMUT_FINISH_NO_FENCE
spawn MUT_NO_CAS                safety fail $STALL -DMUT_NO_CAS
spawn MUT_NO_SWEEP_LEASE        safety fail $NONE  -DMUT_NO_SWEEP_LEASE
spawn MUT_ORDER                 safety fail $NONE  -DMUT_ORDER
spawn MUT_REPLAY_FIRST          safety fail $NONE  -DMUT_REPLAY_FIRST
spawn MUT_ROW_TOKEN             safety fail $STALL -DMUT_ROW_TOKEN
spawn MUT_REPLACE_KEEPS_REQUEST safety fail $STALL -DMUT_REPLACE_KEEPS_REQUEST
spawn MUT_COMPLETER_DISCARD_ANY safety fail $CRASH -DCALL_FIRST -DMUT_COMPLETER_DISCARD_ANY
spawn MUT_COMPLETER_STALE_DISCARD safety fail $STALL -DCALL_FIRST -DMUT_COMPLETER_STALE_DISCARD
spawn MUT_TAKEOVER_UNCOUNTED    safety fail $LOOP  -DMUT_TAKEOVER_UNCOUNTED
spawn MUT_COUNT_RELEASED        safety fail $THROW -DMUT_COUNT_RELEASED
wait

failures=0
total_states=0
echo "real model (0 errors expected), then mutants (a counterexample expected):"
for name in "${order[@]}"; do
  if [ -f "$work/$name.line" ]; then cat "$work/$name.line"; else echo "$name: no result"; fi
  if [ ! -f "$work/$name.line" ] || ! head -n 1 "$work/$name.line" | grep -q ' ok\( (counterexample)\)\?$'; then
    failures=$((failures + 1))
  fi
  total_states=$((total_states + $(cat "$work/$name.states" 2>/dev/null || echo 0)))
done
echo "total states stored (all runs): $total_states, wall time $((SECONDS - started_all)) s"
if [ "$failures" -ne 0 ]; then
  echo "model: $failures run(s) with an unexpected outcome" >&2
  exit 1
fi
echo "model: every property holds on the real model; every mutant has a counterexample"
