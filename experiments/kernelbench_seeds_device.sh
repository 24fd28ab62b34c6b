#!/usr/bin/env bash
# Deliverable 1 of issue 33 over whole KernelBench levels: kernelbench_seeds.py on every GPU of the
# machine at once, the problems (those matching ONLY) dealt out in turn.  One device-tool call
# (carry .whl, the folders and FROM's files).  Each GPU first times the seeds that FROM's records
# (kernelbench_seeds.json of earlier calls) derived but did not time with every kernel a run starts
# from (kernelbench_seeds.timed_already), into $OUT/gpu<i>/timed/, then
# derives and times the problems no record derived, into $OUT/gpu<i>/derived/.  The device tool
# hands back a few files only: everything comes back as $OUT/seeds.tar.gz, packed every minute (a
# call killed at its limit keeps the last one) and at the end.  No captures.
#   OUT=$OUT FOLDERS=".kbsrc/all/level1 .kbsrc/all/level2" ONLY='^level1/' FROM="a.json b.json" \
#       DEADLINE_S=520 bash experiments/kernelbench_seeds_device.sh
# REDERIVE: a regex of problems derived again though a record holds their seed (a capture changed).
# AGAIN: a regex of problems timed again though a record timed them (their starting kernels changed).
# DEADLINE_S: seconds from the start after which no timing starts (derivation has no deadline:
# about 10 s of one GPU a problem, with 14 workers).
set -u
OUT=${OUT:?set OUT}
FOLDERS=${FOLDERS:?set FOLDERS}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site LITELLM_LOCAL_MODEL_COST_MAP=True
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt"
GPUS=$(nvidia-smi -L | wc -l)
WORKERS=${WORKERS:-$(($(nproc) / GPUS - 2))}
# Per GPU: a regex of the seeds to time, and one of the problems to derive ("^$" where none).
python3 - "$GPUS" "${ONLY:-.}" "${REDERIVE:-^$}" "${AGAIN:-^$}" "$OUT/shares.json" $FOLDERS -- ${FROM:-} <<'EOF'
import json, re, sys
from pathlib import Path
sys.path.insert(0, "experiments")
from kernelbench_seeds import timed_already
gpus, only, rederive, again, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
split = sys.argv.index("--")
folders, records = sys.argv[6:split], sys.argv[split + 1:]
names = sorted(f"{Path(f).name}/{p.stem}" for f in folders for p in Path(f).glob("*.py"))
names = [n for n in names if re.search(only, n)]
derived, timed = set(), set()
for path in records:
    for row in json.loads(Path(path).read_text())["problems"]:
        if (row.get("derive") or {}).get("seconds") is not None and row.get("seed") \
                and not re.search(rederive, row["name"]):
            derived.add(row["name"])
            # timed with every kernel a run starts the task from (not so: a record from before the twins were timed)
            if timed_already(row, "strict") and not re.search(again, row["name"]):
                timed.add(row["name"])
pick = lambda group, i: "^(" + "|".join(re.escape(n) for n in group[i::gpus]) + ")$" if group[i::gpus] else "^$"
to_time = [n for n in names if n in derived and n not in timed]
to_derive = [n for n in names if n not in derived]
shares = [{"time": pick(to_time, i), "derive": pick(to_derive, i)} for i in range(gpus)]
Path(out).write_text(json.dumps(shares, indent=1))
print(f"{len(to_time)} seeds to time, {len(to_derive)} problems to derive, {len(timed)} timed before")
EOF
share() { python3 -c "import json,sys; print(json.load(open('$OUT/shares.json'))[$1]['$2'])"; }
for ((i = 0; i < GPUS; i++)); do
    mkdir -p "$OUT/gpu$i/timed" "$OUT/gpu$i/derived"
    (
        export CUDA_VISIBLE_DEVICES=$i
        common=(--workers "$WORKERS" --time-workers "${TIME_WORKERS:-3}" --timeout "${TIMEOUT_S:-150}")
        if [ "$(share $i time)" != '^$' ]; then
            python3 experiments/kernelbench_seeds.py $FOLDERS --out "$OUT/gpu$i/timed" --only "$(share $i time)" \
                --seeds-from $FROM "${common[@]}" --again "${AGAIN:-^$}" --deadline "$((${DEADLINE_S:-520} - SECONDS))" \
                > "$OUT/gpu$i/timed/log.txt" 2>&1
        fi
        if [ "$(share $i derive)" != '^$' ]; then
            python3 experiments/kernelbench_seeds.py $FOLDERS --out "$OUT/gpu$i/derived" --only "$(share $i derive)" \
                "${common[@]}" --deadline "$((${DEADLINE_S:-520} - SECONDS))" > "$OUT/gpu$i/derived/log.txt" 2>&1
        fi
    ) &
done
pack() { tar czf "$OUT/.seeds.tar.gz" -C "$OUT" shares.json $(cd "$OUT" && ls -d gpu*) && mv "$OUT/.seeds.tar.gz" "$OUT/seeds.tar.gz"; }
while sleep 60; do pack; done &
packer=$!
wait $(jobs -p | grep -v "^$packer$")
kill $packer
pack && tail -n 4 "$OUT"/gpu*/*/log.txt && rm -rf "$OUT"/gpu*
