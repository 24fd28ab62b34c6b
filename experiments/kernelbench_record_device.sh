#!/usr/bin/env bash
# One device-tool call of issue 33's record (experiments/kernelbench_search.md): the wheels the
# device lacks installed from the carried .whl/ (bash ../shared/device/wheelhouse.sh), then
# kernelbench_search.sh with both tolerances side by side, 20 children a problem, each run
# resumed from $RUNS or, on a fresh machine, from $KEEP/<label>.tar.gz (a call before's, carried).
#   carry: [".whl", ".kbsrc", "$KEEP"]; .kbsrc/search from `kernelbench_search.py draw`; BACKEND=ray
#   (the engine's default) where SEARCHES holds one search: Ray runs one local cluster a machine
#   SEARCHES="strict=0,1 kernelbench=2,3" KEEP=.kbruns RUNS=/tmp/kbs BUDGET_S=570 \
#       bash experiments/kernelbench_record_device.sh
# BUDGET_S: keep it a minute under the device's budget_left_s, which also caps the call's limit; a
# call killed at that limit still hands back $OUT/<label>.tar.gz as of its last snapshot (every
# SNAPSHOT_S, 120 s).  A run spread over sessions: commit each call's $OUT/<label>.tar.gz (a few MB once its archive is
# checkpointed) where the next session's checkout will find it, and carry it as $KEEP.
set -u
OUT=${OUT:?set OUT}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site LITELLM_LOCAL_MODEL_COST_MAP=True
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt"
OUT=$OUT TASKS=${TASKS:-.kbsrc/search} SEARCHES="${SEARCHES:-strict=0,1 kernelbench=2,3}" KEEP=${KEEP:-} \
    RUNS=${RUNS:-/tmp/kbs} LIMIT=$((${BUDGET_S:-570} - SECONDS)) PER_TASK=${PER_TASK:-20} BACKEND=${BACKEND:-local} \
    bash "$(dirname "$0")/kernelbench_search.sh"
