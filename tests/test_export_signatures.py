"""A library exported from KernelBench-style problems imports and runs whatever annotations,
defaults or keyword arguments the reference's ``forward`` has, and says where each number came from."""
import json
import subprocess
import sys

import pytest

from evo.cli import main
from evo.views.export import forward_signature
from tests.test_cli import LOCAL, evo
from tests.test_export import ENGINE, selftest

PROBLEM = '''
import torch
import torch.nn as nn

SCALE = 2.0


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor, scale: float = SCALE, *, shift: float = 0.0) -> torch.Tensor:
        return x * scale + shift


def get_inputs():
    return [torch.randn(1000)]


def get_init_inputs():
    return []
'''
SEED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_kernel(x_ptr, out_ptr, n, scale, shift, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, scale: float = 2.0, *, shift: float = 0.0):
        out = torch.empty_like(x)
        n = x.numel()
        scaled_kernel[(triton.cdiv(n, 256),)](x, out, n, float(scale), float(shift), BLOCK_SIZE=256)
        return out
'''


def test_the_signature_drops_annotations_and_defers_non_literal_defaults():
    signature, call = forward_signature(PROBLEM)
    assert signature == "x, scale=_runtime.DEFAULT, *, shift=0.0"
    assert call == "x, scale, shift=shift"


@pytest.mark.slow
def test_an_exported_annotated_forward_imports_runs_and_records_its_environment(tmp_path):
    folder = tmp_path / "problems"
    (folder / "seeds").mkdir(parents=True)
    (folder / "scaled.py").write_text(PROBLEM)
    (folder / "seeds" / "scaled.py").write_text(SEED)
    run_dir = tmp_path / "run"
    out = evo("run", f"run.dir={run_dir}", f"task.path={folder}", "run.budget.evaluations=1", *LOCAL)
    assert out.returncode == 0, out.stdout + out.stderr
    library = tmp_path / "annotated_lib"
    assert main(["export", f"run.dir={run_dir}", f"out={library}"]) == 0
    check = selftest(library, {"TRITON_INTERPRET": "1"})
    assert check.returncode == 0, check.stdout + check.stderr
    # Called as users call it, with no engine package importable: default, positional and keyword forms.
    script = (f"import sys; sys.modules.update(dict.fromkeys({ENGINE!r})); import torch; "
              "from annotated_lib.scaled import scaled; x = torch.randn(1000); "
              "assert torch.allclose(scaled(x), x * 2.0, atol=1e-6); "
              "assert torch.allclose(scaled(x, 3.0, shift=1.0), x * 3.0 + 1.0, atol=1e-6); print('ok')")
    called = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300, env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"})
    assert called.returncode == 0 and "ok" in called.stdout, called.stderr
    manifest = json.loads((library / "manifest.json").read_text())
    kernel = manifest["tasks"]["scaled"]["kernels"][0]
    environment = kernel["environment"]  # the evaluation's, not the exporting machine's
    assert environment["torch"] == kernel["torch"] and environment["gpu"] == "cpu (Triton interpreter)"
    assert environment["engine"].startswith("0.1.0") and set(environment) >= {"driver", "cuda", "triton", "python"}
    assert "exported_with" in manifest["history"][-1]
