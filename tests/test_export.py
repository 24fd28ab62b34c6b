"""`evo export`: a package that needs only torch and triton, its selftest, merging and refusals."""
import json
import os
import subprocess
import sys

import pytest

from evo.cli import main
from evo.export import _runtime_module, forward_signature, merge_kernels

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
    assert gelu["buckets"] == [dict(device_class="cpu", name="all", max_numel=None, kernel=best["module"])]
    for key in ("speedup", "roofline_fraction", "device", "torch", "triton", "source_hash", "source_sha256",
                "reference_hash", "lineage", "program_id", "timing_representative"):
        assert key in best
    assert best["lineage"][-1] == best["program_id"] and best["run"] == str(small_run)
    assert [h["run"] for h in manifest["history"]] == [str(small_run)]
    for k in gelu["kernels"]:
        assert "class ModelNew" in (library / "kernels" / f"{k['module']}.py").read_text()
    assert "REFERENCE_SOURCE" in (library / "gelu.py").read_text()


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


def _kernel(module, speedup, device_class="h100"):
    return dict(module=module, source_hash=module, speedup=speedup, device_class=device_class, bucket="all")


def test_merge_replaces_only_with_faster_kernels_of_the_same_device_class():
    old = [_kernel("a", 2.0), _kernel("b", 1.5, "a100")]
    kept, dropped = merge_kernels(old, [_kernel("c", 1.9), _kernel("d", 1.0, "a100")], top_k=1)
    assert [k["module"] for k in kept] == ["a", "b"] and dropped == []
    kept, dropped = merge_kernels(old, [_kernel("c", 2.5), _kernel("e", 3.0, "h200")], top_k=1)
    assert [k["module"] for k in kept] == ["c", "b", "e"] and [k["module"] for k in dropped] == ["a"]
    kept, _ = merge_kernels(old, [_kernel("c", 2.0)], top_k=1)  # a tie keeps the old kernel
    assert kept[0]["module"] == "a"
    kept, _ = merge_kernels([_kernel("a", 2.0)], [_kernel("c", 2.5), _kernel("f", 1.0)], top_k=2)
    assert [k["module"] for k in kept] == ["c", "a"]


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
