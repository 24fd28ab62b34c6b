#!/usr/bin/env bash
# `evo run` over unchanged KernelBench problem files mixed with faulty tasks (a reference that
# raises, one that runs out of GPU memory, one torch.compile gives no seed for), then export,
# the library's self-test in a fresh virtualenv, report and status: issue 14's end to end.
#   OUT=/tmp/out KB=.kb bash experiments/kernelbench_run.sh PROBLEM... [-- evo run overrides ...]
# PROBLEM: a path under $KB such as level1/23_Softmax.py.  Results as gpu_run_export_report.sh's.
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
KB=${KB:?set KB to the folder holding KernelBench levels}
TASKS=$OUT/tasks/kb_mix
mkdir -p "$TASKS"
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  cp "$KB/$1" "$TASKS/$(basename "$1" | sed 's/^\([0-9]*\)_/l'"$(dirname "$1" | tr -dc 0-9)"'_\1_/')"
  shift
done
[ "${1:-}" = "--" ] && shift
cp "$(dirname "$0")"/data/faulty_tasks/*.py "$TASKS/"
ls "$TASKS"
bash "$(dirname "$0")/gpu_run_export_report.sh" task.path="$TASKS" evaluator.device=cuda "$@"
