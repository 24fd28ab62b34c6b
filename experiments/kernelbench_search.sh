#!/usr/bin/env bash
# Issue 33's record on one node of GPUs: the offline search, defaults otherwise, one run per label of
# SEARCHES ("label=GPUs", a label `kernelbench` runs under evaluator.tolerance=kernelbench), side by
# side, PER_TASK (20) children a problem.  BACKEND (default local): Ray supports one local cluster
# per machine, and two runs must not share evaluators; a single search may take BACKEND=ray, the
# engine's default.  Each call stops its runs after LIMIT seconds and
# leaves every run directory as $OUT/<label>.tar.gz; the next call, on this machine or a fresh one,
# resumes each from $RUNS or, where that is gone, from $KEEP/<label>.tar.gz (a call before's, carried back):
#   OUT=/tmp/out TASKS=.kbsrc/search SEARCHES="strict=0,1,2,3" KEEP=.kbruns bash experiments/kernelbench_search.sh
# SEEDS_FROM=strict: every run takes the seeds and checks of $RUNS/strict (run.seeds_from), as a
# kernelbench-tolerance run after the strict one on the same host does.
# TASKS: the problems `experiments/kernelbench_search.py draw` copied.  Logs, `evo status` and the
# tables go to $OUT/report.tar.gz.  Every SNAPSHOT_S (120) seconds each run is also copied to
# $OUT/<label>.tar.gz while it runs (snapshot_run.py), so a call killed before its end hands back
# the run as of its last snapshot.
set -uo pipefail
OUT=${OUT:?set OUT}; TASKS=${TASKS:?set TASKS}; RUNS=${RUNS:-/tmp/kbs}; KEEP=${KEEP:-}
SEARCHES=${SEARCHES:-"strict=0,1 kernelbench=2,3"}
LIMIT=${LIMIT:-480}; PER_TASK=${PER_TASK:-20}; BUDGET=${BUDGET:-$((PER_TASK * $(ls "$TASKS"/*.py | wc -l)))}
here=$(dirname "$0")
mkdir -p "$OUT/report" "$RUNS"
search() {  # label, GPUs
  local label=$1 gpus=$2 extra=()
  [ "$label" = kernelbench ] && extra=(evaluator.tolerance=kernelbench)
  if [ ! -e "$RUNS/$label" ] && [ -n "$KEEP" ] && [ -f "$KEEP/$label.tar.gz" ]; then
    tar xzf "$KEEP/$label.tar.gz" -C "$RUNS" && echo "$label: resumed from $KEEP/$label.tar.gz"
  fi
  # SEEDS_FROM: a run directory (or a label of $RUNS) whose derived seeds and checks this run takes
  # when it starts (a resume holds them already)
  [ -n "${SEEDS_FROM:-}" ] && [ ! -e "$RUNS/$label" ] && \
    extra+=("run.seeds_from=$([ -d "$RUNS/$SEEDS_FROM" ] && echo "$RUNS/$SEEDS_FROM" || echo "$SEEDS_FROM")")
  CUDA_VISIBLE_DEVICES=$gpus timeout -s INT -k 60 "$LIMIT" python3 -m evo.cli run run.dir="$RUNS/$label" \
    task.path="$TASKS" run.budget.evaluations="$BUDGET" run.budget.per_task="$PER_TASK" run.progress=false \
    run.backend="${BACKEND:-local}" \
    evaluator.device="${DEVICE:-cuda}" "${extra[@]}" >> "$OUT/report/$label.log" 2>&1
  echo "$label: exit $? after $SECONDS s"
}
snapshots() {  # each run to $OUT/<label>.tar.gz every SNAPSHOT_S seconds, until the file $1 exists
  local next=$((SECONDS + ${SNAPSHOT_S:-120})) label
  while [ ! -e "$1" ]; do
    sleep 2
    [ "$SECONDS" -lt "$next" ] && continue
    for label in "${labels[@]}"; do
      [ -f "$RUNS/$label/archive.db" ] && python3 "$here/snapshot_run.py" "$RUNS/$label" "$OUT/$label.tar.gz" \
        >> "$OUT/report/snapshots.log" 2>&1
    done
    next=$((SECONDS + ${SNAPSHOT_S:-120}))
  done
}
labels=(); searches=()
for spec in $SEARCHES; do
  labels+=("${spec%%=*}")
  search "${spec%%=*}" "${spec#*=}" &
  searches+=($!)
done
stop=$(mktemp -u); snapshots "$stop" &
snapshotter=$!
wait "${searches[@]}"
touch "$stop"; wait "$snapshotter"; rm -f "$stop"
runs=()
for label in "${labels[@]}"; do
  tar czf "$OUT/$label.tar.gz" -C "$RUNS" "$label"
  python3 -m evo.cli status run.dir="$RUNS/$label" > "$OUT/report/${label}_status.txt" 2>&1
  tail -20 "$OUT/report/$label.log"
  runs+=(--run "$label=$RUNS/$label")
done
python3 "$here/kernelbench_search.py" seeds --run "$RUNS/${labels[0]}" --out "$OUT/report/seeds"
python3 "$here/kernelbench_search.py" collect "${runs[@]}" --out "$OUT/report" | head -60
tar czf "$OUT/report.tar.gz" -C "$OUT" report && rm -rf "$OUT/report"
