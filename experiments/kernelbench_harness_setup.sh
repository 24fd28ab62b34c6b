#!/usr/bin/env bash
# Copy KernelBench's package (src/kernelbench/) from a bare git mirror into .kbsrc/kernelbench/ (git-ignored:
# KernelBench's files are never committed here) for experiments/kernelbench_harness_rate.py.
# Usage, from the project root:  bash experiments/kernelbench_harness_setup.sh [MIRROR_GIT_DIR] [REV]
set -euo pipefail
mirror=${1:-/work/.mirror/ScalingIntelligence+KernelBench/repo}
rev=${2:-HEAD}
root=$(git rev-parse --show-toplevel)
cd "$root"
rm -rf .kbsrc && mkdir -p .kbsrc
git -C "$mirror" archive "$rev" src/kernelbench | tar -x -C .kbsrc --strip-components=1
git -C "$mirror" rev-parse "$rev" > .kbsrc/COMMIT
echo "KernelBench $(cat .kbsrc/COMMIT) -> $root/.kbsrc/kernelbench"
