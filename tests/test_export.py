"""`evo export`: a package that needs only torch and triton, its selftest, merging and refusals."""
import json
import os
import subprocess
import sys

import pytest

from evo.cli import main
from evo.views.export import _buckets, _runtime_module, forward_signature, merge_kernels

ENGINE = ("evo", "archive", "evaluator", "islands", "operators", "hydra", "ray", "sqlalchemy")
# Runs the package's selftest with every engine package made unimportable.
SELFTEST = ("import runpy, sys; sys.modules.update(dict.fromkeys({engine!r})); "
            "runpy.run_module('{package}.selftest', run_name='__main__')")


def selftest(library, env_extra):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | env_extra
    return subprocess.run([sys.executable, "-c", SELFTEST.format(engine=ENGINE, package=library.name)],
                          cwd=library.parent, capture_output=True, text=True, timeout=300, env=env)


@pytest.fixture(scope="module")
def library(small_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export") / "kernels_lib"
    assert main(["export", f"run.dir={small_run}", f"out={out}", "top_k=2"]) == 0
    return out


def test_export_writes_a_package_with_a_manifest(library, small_run):
    manifest = json.loads((library / "manifest.json").read_text())
    assert manifest["format"] == "evo-kernel-library" and manifest["package"] == "kernels_lib"
    assert set(manifest["tasks"]) == {"gelu", "row_sum"}
    gelu = manifest["tasks"]["gelu"]
    assert gelu["signature"] == "x" and len(gelu["kernels"]) == 2  # gelu has at least two correct kernels
    best = gelu["kernels"][0]
    assert best["speedup"] >= gelu["kernels"][1]["speedup"]
    assert gelu["buckets"] == [dict(device_class="cpu", name="all", max_numel=None, kernel=best["module"],
                                    speedup=best["speedup"], speedup_noise=best["speedup_noise"])]
    assert best["shapes"] == [dict(bucket="all", max_numel=None, speedup=best["speedup"],
                                   speedup_noise=best["speedup_noise"])]  # no shape timings in this run
    for key in ("speedup", "roofline_fraction", "device", "torch", "triton", "source_hash", "source_sha256",
                "reference_hash", "lineage", "program_id", "timing_representative"):
        assert key in best
    assert best["lineage"][-1] == best["program_id"] and best["run"] == str(small_run)
    assert [h["run"] for h in manifest["history"]] == [str(small_run)]
    for k in gelu["kernels"]:
        assert "class ModelNew" in (library / "kernels" / f"{k['module']}.py").read_text()
    assert "REFERENCE_SOURCE" in (library / "gelu.py").read_text()


@pytest.mark.slow
def test_selftest_runs_under_the_interpreter_without_the_engine(library):
    out = selftest(library, {"TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "timings are not representative" in out.stdout
    manifest = json.loads((library / "manifest.json").read_text())
    kernels = sum(len(t["kernels"]) for t in manifest["tasks"].values())
    assert out.stdout.count(" ok ") == kernels and "all kernels match their references" in out.stdout


@pytest.mark.skipif(os.path.exists("/dev/nvidia0"), reason="a GPU is present")
def test_selftest_without_gpu_or_interpreter_says_it_needs_a_gpu(library):
    out = selftest(library, {})
    assert out.returncode == 2 and "needs a CUDA GPU" in out.stderr


@pytest.mark.slow
def test_selftest_fails_on_a_wrong_kernel(library, tmp_path):
    import shutil
    broken = tmp_path / "broken_lib"
    shutil.copytree(library, broken)
    entry = json.loads((broken / "manifest.json").read_text())["tasks"]["row_sum"]["kernels"][0]
    path = broken / "kernels" / f"{entry['module']}.py"
    source = path.read_text()
    assert "tl.store(out_ptr + row, tl.sum(" in source
    path.write_text(source.replace("tl.store(out_ptr + row, tl.sum(", "tl.store(out_ptr + row, 2 * tl.sum("))
    out = selftest(broken, {"TRITON_INTERPRET": "1"})
    assert out.returncode == 1 and "FAILED" in out.stdout and "1 failed" in out.stdout


@pytest.mark.slow
def test_the_exported_function_has_the_reference_signature(library):
    code = ("import torch, kernels_lib.row_sum as m; x = torch.randn(5, 7); "
            "assert torch.allclose(m.row_sum(x), x.sum(-1), atol=1e-5); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=library.parent, capture_output=True, text=True,
                         timeout=120, env=os.environ | {"TRITON_INTERPRET": "1"})
    assert out.stdout.strip() == "ok", out.stderr


def test_export_into_the_library_merges_and_keeps_history(small_run, tmp_path, capsys):
    out = tmp_path / "lib"
    assert main(["export", f"run.dir={small_run}", f"out={out}", "tasks=gelu"]) == 0
    assert main(["export", f"run.dir={small_run}", f"out={out}", "tasks=[row_sum,gelu]"]) == 0
    printed = capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["tasks"]) == {"gelu", "row_sum"} and len(manifest["history"]) == 2
    assert len(manifest["tasks"]["gelu"]["kernels"]) == 1  # the same kernel again: nothing changed
    assert [c["task"] for c in manifest["history"][1]["changes"]] == ["row_sum"]
    assert "row_sum: added" in printed
    # A kernel of another device class stays beside this run's, each serving its own class.
    manifest["tasks"]["gelu"]["kernels"][0].update(device_class="h100", speedup=9.0, source_hash="other")
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["export", f"run.dir={small_run}", f"out={out}", "tasks=gelu"]) == 0
    assert "gelu: added" in capsys.readouterr().out
    gelu = json.loads((out / "manifest.json").read_text())["tasks"]["gelu"]
    assert sorted(b["device_class"] for b in gelu["buckets"]) == ["cpu", "h100"]
    assert [k["speedup"] for k in gelu["kernels"]][0] == 9.0 and len(gelu["kernels"]) == 2


def _kernel(module, speedup, device_class="h100", shapes=None):
    """A manifest kernel entry; ``shapes``: its speedup per bucket (max_numel), else ``speedup`` on ``all``."""
    shapes = shapes or {None: speedup}
    return dict(module=module, source_hash=module, speedup=speedup, device_class=device_class,
                shapes=[dict(bucket=str(m), max_numel=m, speedup=s, speedup_noise=None) for m, s in shapes.items()])


def test_merge_replaces_only_with_faster_kernels_of_the_same_device_class():
    old = [_kernel("a", 2.0), _kernel("b", 1.5, "a100")]
    kept, dropped = merge_kernels(old, [_kernel("c", 1.9), _kernel("d", 1.0, "a100")], top_k=1)
    assert [k["module"] for k in kept] == ["a", "b"] and dropped == []
    kept, dropped = merge_kernels(old, [_kernel("c", 2.5), _kernel("e", 3.0, "h200")], top_k=1)
    assert [k["module"] for k in kept] == ["e", "c", "b"] and [k["module"] for k in dropped] == ["a"]
    kept, _ = merge_kernels(old, [_kernel("c", 2.0)], top_k=1)  # a tie keeps the old kernel
    assert kept[0]["module"] == "a"
    kept, _ = merge_kernels([_kernel("a", 2.0)], [_kernel("c", 2.5), _kernel("f", 1.0)], top_k=2)
    assert [k["module"] for k in kept] == ["c", "a"]


def test_merge_replaces_kernels_per_bucket():
    old = [_kernel("a", 1.0, shapes={100: 3.0, None: 1.0}), _kernel("b", 1.4, shapes={100: 0.5, None: 1.4})]
    new = [_kernel("c", 2.0, shapes={100: 2.0, None: 2.0})]
    kept, dropped = merge_kernels(old, new, top_k=1)
    assert [k["module"] for k in kept] == ["c", "a"] and [k["module"] for k in dropped] == ["b"]
    assert merge_kernels(old, new, top_k=2)[1] == []  # b is second on the largest bucket
    buckets = {b["max_numel"]: b["kernel"] for b in _buckets(kept)}
    assert buckets == {100: "a", None: "c"}  # a stays faster on the small bucket; c takes the largest
    # A kernel timed on the largest shape set only (bucket all) competes for the largest bucket.
    kept, dropped = merge_kernels(kept, [_kernel("d", 2.5)], top_k=1)
    assert {b["max_numel"]: b["kernel"] for b in _buckets(kept)} == {100: "a", None: "d"}
    assert [k["module"] for k in dropped] == ["c"]


def test_device_class_and_signature():
    device_class = _runtime_module().device_class
    assert device_class("NVIDIA H100 80GB HBM3") == device_class("NVIDIA H100 PCIe") == "h100"
    assert device_class("NVIDIA A100-SXM4-80GB") == "a100" and device_class("cpu (Triton interpreter)") == "cpu"
    source = "class Model:\n    def forward(self, x, w=None, *rest, eps=1e-5, **kw):\n        pass\n"
    assert forward_signature(source) == ("x, w=None, *rest, eps=1e-05, **kw", "x, w, *rest, eps=eps, **kw")


@pytest.mark.parametrize("case", ["not_a_library", "a_file", "missing_run", "no_kernel", "unknown_task",
                                  "bad_top_k", "no_out", "bad_name"])
def test_export_refusals_write_nothing(small_run, tmp_path, capsys, case):
    out = tmp_path / "lib"
    args = [f"run.dir={small_run}", f"out={out}"]
    if case == "not_a_library":
        out.mkdir()
        (out / "mine.py").write_text("keep me\n")
    elif case == "a_file":
        out.write_text("keep me\n")
    elif case == "missing_run":
        args[0] = f"run.dir={tmp_path / 'nope'}"
    elif case == "no_kernel":
        args.append("min_speedup=1e9")
    elif case == "unknown_task":
        args.append("tasks=softmax")
    elif case == "bad_top_k":
        args.append("top_k=0")
    elif case == "no_out":
        args = args[:1]
    elif case == "bad_name":
        out = tmp_path / "my-lib"
        args[1] = f"out={out}"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert main(["export", *args]) == 2
    expected = {"not_a_library": "is not a kernel library", "a_file": "is not a kernel library",
                "missing_run": "does not exist", "no_kernel": "no correct kernel", "unknown_task": "no task softmax",
                "bad_top_k": "top_k must be at least 1", "no_out": "usage: evo export",
                "bad_name": "must be a Python identifier"}[case]
    assert expected in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    if case in ("not_a_library", "a_file"):
        assert (out / "mine.py" if case == "not_a_library" else out).read_text() == "keep me\n"


def test_export_reads_an_archive_of_an_older_schema(small_run, tmp_path):
    import shutil
    import sqlite3

    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    with sqlite3.connect(run_dir / "archive.db") as db:  # schema 1 had none of these columns
        for column in ("roofline_fraction", "speedup_vs_compiled", "speedup_noise"):
            db.execute(f"ALTER TABLE evaluations DROP COLUMN {column}")
    assert main(["export", f"run.dir={run_dir}", f"out={tmp_path / 'lib'}", "tasks=row_sum"]) == 0
    kernel = json.loads((tmp_path / "lib" / "manifest.json").read_text())["tasks"]["row_sum"]["kernels"][0]
    assert kernel["roofline_fraction"] is None and kernel["speedup"] > 0


@pytest.fixture(scope="module")
def bucket_library(timed_run, tmp_path_factory):
    """The export of a run whose kernels were timed on every shape set (tests/timed_run.py)."""
    run_dir, _ = timed_run
    out = tmp_path_factory.mktemp("export") / "bucket_lib"
    assert main(["export", f"run.dir={run_dir}", f"out={out}"]) == 0
    return out


def test_export_gives_each_shape_bucket_its_fastest_kernel(bucket_library, timed_run):
    _, ids = timed_run
    small, mid, large = ids["row_sum"]  # fastest on the two smallest shape sets, on the third, on the largest
    tasks = json.loads((bucket_library / "manifest.json").read_text())["tasks"]
    row_sum = tasks["row_sum"]
    program = {k["module"]: k["program_id"] for k in row_sum["kernels"]}
    assert [(b["name"], b["max_numel"], program[b["kernel"]], b["speedup"]) for b in row_sum["buckets"]] == [
        ("rows=1,cols=1023", 1023, small, 2.0), ("rows=33,cols=257", 8481, small, 1.8),
        ("rows=7,cols=4097", 28679, mid, 1.5), ("rows=4096,cols=8192", None, large, 1.6)]
    assert all(b["speedup_noise"] == 0.01 and b["device_class"] == "cpu" for b in row_sum["buckets"])
    # Three kernels, each written once; the incorrect program's faster timings are ignored.
    assert sorted(program.values()) == [small, mid, large]
    assert len(list((bucket_library / "kernels").glob("row_sum_*.py"))) == 3
    best = row_sum["kernels"][0]
    assert best["program_id"] == large and len(best["shapes"]) == 4  # fastest on the largest shape set
    gelu = tasks["gelu"]
    assert len(gelu["kernels"]) == 1 and {b["kernel"] for b in gelu["buckets"]} == {gelu["kernels"][0]["module"]}
    assert [b["max_numel"] for b in gelu["buckets"]] == [1023, 8481, 64643, None]


@pytest.mark.slow
def test_dispatch_picks_the_bucket_by_input_size(bucket_library):
    code = ("import json, torch; from bucket_lib import _runtime; from bucket_lib.row_sum import row_sum; "
            "sizes = [(1, 1000), (1, 1023), (1, 1024), (33, 257), (7, 4097), (8, 4097), (5000, 8192)]; "
            "inputs = [[torch.empty(r, c, device='meta')] for r, c in sizes]; "
            "print(json.dumps([_runtime.kernel_for('row_sum', i) for i in inputs])); "
            "x = torch.randn(7, 4097); assert torch.allclose(row_sum(x), x.sum(-1), atol=1e-3)")
    out = subprocess.run([sys.executable, "-c", code], cwd=bucket_library.parent, capture_output=True, text=True,
                         timeout=120, env=os.environ | {"TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stderr
    serving = {b["max_numel"]: b["kernel"]
               for b in json.loads((bucket_library / "manifest.json").read_text())["tasks"]["row_sum"]["buckets"]}
    assert json.loads(out.stdout) == [serving[1023], serving[1023], serving[8481], serving[8481], serving[28679],
                                      serving[None], serving[None]]


@pytest.mark.slow
def test_selftest_checks_every_kernel_on_every_bucket_it_serves(bucket_library):
    out = selftest(bucket_library, {"TRITON_INTERPRET": "1"})
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stdout.splitlines() if " ok " in line]
    assert len(lines) == 8  # row_sum: 2 + 1 + 1 buckets, gelu: 4
    for bucket in ("rows=1,cols=1023", "rows=33,cols=257", "rows=7,cols=4097", "rows=127,cols=509"):
        assert any(f" {bucket} " in line and "timed on" not in line for line in lines)
    # The largest shape sets are too large for the interpreter: timed on the largest that runs.
    assert sum("rows=4096,cols=8192" in line and "timed on" in line for line in lines) == 2


def test_merge_per_bucket_across_exports_with_and_without_shape_timings(small_run, timed_run, tmp_path, capsys):
    run_dir, ids = timed_run
    out = tmp_path / "lib"
    assert main(["export", f"run.dir={small_run}", f"out={out}"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["tasks"].values():  # as format 1 wrote it: one bucket per kernel
        entry.pop("top_k")
        for k in entry["kernels"]:
            k.update(bucket="all", max_numel=None)
            del k["shapes"]
        entry["buckets"] = [{key: b[key] for key in ("device_class", "name", "max_numel", "kernel")}
                            for b in entry["buckets"]]
    manifest["format_version"] = 1
    (out / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["export", f"run.dir={run_dir}", f"out={out}"]) == 0
    printed = capsys.readouterr().out
    assert "row_sum: added" in printed and "serves rows=1,cols=1023, rows=33,cols=257" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format_version"] == 2
    row_sum = manifest["tasks"]["row_sum"]
    program = {k["module"]: k["program_id"] for k in row_sum["kernels"]}
    assert [program[b["kernel"]] for b in row_sum["buckets"]] == [ids["row_sum"][0]] * 2 + ids["row_sum"][1:]
    dropped = [c for c in manifest["history"][-1]["changes"] if c["action"] == "dropped"]
    assert {c["task"] for c in dropped} == {"gelu", "row_sum"}  # the interpreter's slow 'all' kernels
    # A kernel of the library faster on one bucket keeps it; the run's kernels keep the others.
    mid = next(k for k in row_sum["kernels"] if k["program_id"] == ids["row_sum"][1])
    mid["shapes"][0]["speedup"] = 5.0
    (out / "manifest.json").write_text(json.dumps(manifest))
    assert main(["export", f"run.dir={run_dir}", f"out={out}"]) == 0
    assert "no kernel changed" in capsys.readouterr().out
    row_sum = json.loads((out / "manifest.json").read_text())["tasks"]["row_sum"]
    program = {k["module"]: k["program_id"] for k in row_sum["kernels"]}
    assert [(program[b["kernel"]], b["speedup"]) for b in row_sum["buckets"]] == [
        (ids["row_sum"][1], 5.0), (ids["row_sum"][0], 1.8), (ids["row_sum"][1], 1.5), (ids["row_sum"][2], 1.6)]
