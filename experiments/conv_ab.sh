#!/usr/bin/env bash
# Two versions of the seeds' convolution (evaluator/conv_kernel.py) side by side on every
# convolution of a folder of KernelBench problems, one shard of the problems per GPU, each with
# the tile a seed starts from (experiments/conv_tile_probe.py --seed-tile), then one table and the
# geomean of NOW's time over BEFORE's; $OUT/conv_ab_verdict says which was faster ("now" where the
# geomean is at most 1 and the compiled tests/test_conv_kernel.py pass, else "before").
#   BEFORE=.kbsrc/conv_kernel_s9.py OUT=$OUT TASKS=.kbsrc/search GPUS="0 1 2 3" bash experiments/conv_ab.sh
set -uo pipefail
OUT=${OUT:?set OUT}; TASKS=${TASKS:?set TASKS}; BEFORE=${BEFORE:?set BEFORE}
NOW=${NOW:-evaluator/conv_kernel.py}; GPUS=${GPUS:-0}; DEADLINE=${DEADLINE:-300}
here=$(dirname "$0")
mkdir -p "$OUT/conv_ab"
read -ra gpus <<< "$GPUS"
# the compiled tests first, alone on their GPU (15-20 s), so that they time nothing of a shard
CUDA_VISIBLE_DEVICES=${gpus[0]} python3 -m pytest -q -p no:cacheprovider tests/test_conv_kernel.py \
  > "$OUT/conv_ab/pytest.log" 2>&1
tests=$?
# the convolution problems in name order, dealt round-robin over the GPUs
mapfile -t files < <(ls "$TASKS"/*.py | grep -i conv | xargs -n1 basename | sed 's/\.py$//')
for i in "${!gpus[@]}"; do
  shard=()
  for j in "${!files[@]}"; do (( j % ${#gpus[@]} == i )) && shard+=("${files[$j]}"); done
  [ ${#shard[@]} -eq 0 ] && continue
  CUDA_VISIBLE_DEVICES=${gpus[$i]} python3 "$here/conv_tile_probe.py" "$TASKS" --seed-tile --deadline "$DEADLINE" \
    --out "$OUT/conv_ab/shard$i.json" --library "before=$BEFORE" --library "now=$NOW" --only "${shard[@]}" \
    > "$OUT/conv_ab/shard$i.log" 2>&1 &
done
wait
python3 - "$OUT" "$tests" <<'PY'
import glob, json, math, sys
out, tests = sys.argv[1], int(sys.argv[2])
rows = [r for f in sorted(glob.glob(f"{out}/conv_ab/shard*.json")) for r in json.load(open(f))["rows"]]
ratios = []
print("| problem | conv | cuDNN ms | before ms | now ms | now / before |\n| --- | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    before, now = r.get("before_ms"), r.get("now_ms")
    if before and now:
        ratios.append(now / before)
    print(f"| {r['problem']} | {r.get('conv', '-')} | {r.get('cudnn_ms', 0):.3f} | {before or '-'} | {now or '-'} | "
          f"{now / before if before and now else '-'} |")
geomean = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else float("nan")
verdict = "now" if ratios and geomean <= 1.0 and tests == 0 else "before"
print(f"\nnow over before, geomean of {len(ratios)} convolutions: {geomean:.3f}; compiled tests "
      f"{'passed' if tests == 0 else 'FAILED'}; verdict: {verdict}")
json.dump({"rows": rows, "geomean_now_over_before": geomean, "tests_exit": tests, "verdict": verdict},
          open(f"{out}/conv_ab.json", "w"), indent=1)
open(f"{out}/conv_ab_verdict", "w").write(verdict + "\n")
PY
tail -3 "$OUT/conv_ab/pytest.log"
# the shards' tables and logs as one file: the device tool brings back a limited number of files
tar czf "$OUT/conv_ab_shards.tar.gz" -C "$OUT" conv_ab && rm -rf "$OUT/conv_ab"
