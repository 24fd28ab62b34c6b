#!/usr/bin/env bash
# Issue 33's record on one node of four GPUs: the offline search under the strict and under the
# kernelbench tolerance side by side, two GPUs each, defaults otherwise.  run.backend=local: Ray
# supports one local cluster per machine, and the two runs must not share evaluators.  Called again
# with the same RUNS, each run resumes where the last call stopped it (LIMIT seconds per call).
#   OUT=/tmp/out TASKS=.kbsrc/search RUNS=/tmp/kbs bash experiments/kernelbench_search.sh
# TASKS: the problems `experiments/kernelbench_search.py draw` copied.  Tables under $OUT.
set -uo pipefail
OUT=${OUT:?set OUT}; TASKS=${TASKS:?set TASKS}; RUNS=${RUNS:-/tmp/kbs}
LIMIT=${LIMIT:-540}; BUDGET=${BUDGET:-$((20 * $(ls "$TASKS"/*.py | wc -l)))}
mkdir -p "$OUT" "$RUNS"
search() {  # label, GPUs, overrides...
  local label=$1 gpus=$2
  shift 2
  CUDA_VISIBLE_DEVICES=$gpus timeout -s INT -k 60 "$LIMIT" python3 -m evo.cli run run.dir="$RUNS/$label" \
    task.path="$TASKS" run.budget.evaluations="$BUDGET" run.progress=false run.backend=local \
    evaluator.device=cuda "$@" >> "$OUT/$label.log" 2>&1
  echo "$label: exit $? after $SECONDS s"
}
search strict 0,1 &
search kernelbench 2,3 evaluator.tolerance=kernelbench &
wait
for label in strict kernelbench; do
  python3 -m evo.cli status run.dir="$RUNS/$label" > "$OUT/${label}_status.txt" 2>&1
  tail -30 "$OUT/$label.log"
done
python3 "$(dirname "$0")/kernelbench_search.py" seeds --run "$RUNS/strict" --out "$OUT/seeds"
python3 "$(dirname "$0")/kernelbench_search.py" collect --run strict="$RUNS/strict" \
  --run kernelbench="$RUNS/kernelbench" --out "$OUT" | head -60
