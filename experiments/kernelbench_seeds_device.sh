#!/usr/bin/env bash
# Deliverable 1 of issue 33 over whole KernelBench levels: kernelbench_seeds.py on every GPU of the
# machine at once, problem numbers dealt out by their remainder (problem n to GPU n mod GPUS), each
# GPU's records in $OUT/gpu<i>/kernelbench_seeds.json.  One device-tool call (carry .whl and the
# folders); a later call resumes from the records of the one before (FROM: a folder holding
# gpu<i>/kernelbench_seeds.json, carried), timing what is not yet timed.
#   OUT=$OUT FOLDERS=".kbsrc/all/level1 .kbsrc/all/level2" DEADLINE_S=470 \
#       bash experiments/kernelbench_seeds_device.sh
#   OUT=$OUT FROM=.kbseeds51/call1 FOLDERS=... DEADLINE_S=540 bash experiments/kernelbench_seeds_device.sh
# DEADLINE_S: seconds from the start after which no evaluation starts (derivation has none: a
# first call derives every seed, about 5 minutes for 100 problems on 14 workers).
set -u
OUT=${OUT:?set OUT}
FOLDERS=${FOLDERS:?set FOLDERS}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site LITELLM_LOCAL_MODEL_COST_MAP=True
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt"
GPUS=$(nvidia-smi -L | wc -l)
CORES=$(nproc)
WORKERS=${WORKERS:-$((CORES / GPUS - 2))}
for ((i = 0; i < GPUS; i++)); do
    # level/<n>_...: n mod GPUS == i
    only="^[^/]+/($(seq $i "$GPUS" 200 | paste -sd'|'))_"
    extra=(--captures)
    [ -n "${FROM:-}" ] && extra=(--seeds-from "$FROM/gpu$i/kernelbench_seeds.json")
    mkdir -p "$OUT/gpu$i"
    CUDA_VISIBLE_DEVICES=$i python3 experiments/kernelbench_seeds.py $FOLDERS --out "$OUT/gpu$i" \
        --only "$only" --workers "$WORKERS" --time-workers "${TIME_WORKERS:-3}" --timeout "${TIMEOUT_S:-200}" \
        --deadline "$((${DEADLINE_S:-470} - SECONDS))" "${extra[@]}" \
        > "$OUT/gpu$i/log.txt" 2>&1 &
done
wait
tail -n 8 "$OUT"/gpu*/log.txt
