#!/usr/bin/env bash
# A real search on the GPU(s), then what a user does with it: export the best kernels as a
# library, self-test that library in a fresh virtualenv that has torch and triton but not
# this engine, and write the run's report.
#   OUT=/tmp/out bash experiments/gpu_run_export_report.sh [evo run overrides ...]
# Results: $OUT/run.log, $OUT/export.log, $OUT/selftest.log, $OUT/report/, $OUT/library/
set -uo pipefail
OUT=${OUT:?set OUT to a folder for the results}
RUN=$OUT/run
python3 -m evo.cli run run.dir="$RUN" run.progress=false "$@" > "$OUT/run.log" 2>&1
echo "evo run: exit $?"; tail -25 "$OUT/run.log"

python3 -m evo.cli export run.dir="$RUN" out="$OUT/library/evo_kernels" top_k=2 > "$OUT/export.log" 2>&1
echo "evo export: exit $?"; tail -5 "$OUT/export.log"

# A fresh virtualenv that sees the interpreter's own packages (torch, triton, ...) but neither
# this engine nor what it installed for itself (PYTHONPATH is cleared).
python3 -m venv /tmp/selftest-venv
site=$(/tmp/selftest-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
env -u PYTHONPATH python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$site/image.pth"
( cd "$OUT/library" && env -u PYTHONPATH /tmp/selftest-venv/bin/python - <<'PY'
import importlib.util
for name in ("evo", "archive", "evaluator", "ray", "sqlalchemy", "hydra"):
    assert importlib.util.find_spec(name) is None, f"{name} is importable in the fresh virtualenv"
print("fresh virtualenv: torch and triton, without the engine, ray, sqlalchemy or hydra")
PY
  env -u PYTHONPATH /tmp/selftest-venv/bin/python -m evo_kernels.selftest ) > "$OUT/selftest.log" 2>&1
echo "selftest: exit $?"; cat "$OUT/selftest.log"

python3 -m evo.cli report run.dir="$RUN" out="$OUT/report" > "$OUT/report.log" 2>&1
echo "evo report: exit $?"; tail -3 "$OUT/report.log"
python3 -m evo.cli status run.dir="$RUN" > "$OUT/status.log" 2>&1
cat "$OUT/status.log"
# Few files come back from a remote machine: pack the report, the library and the archive.
tar -C "$OUT" -czf "$OUT/results.tgz" report library run/archive.db run/events.jsonl && rm -rf "$OUT/report" \
  "$OUT/library" "$RUN"
