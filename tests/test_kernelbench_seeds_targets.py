"""``experiments/kernelbench_seeds_targets.py`` sets each problem's seed against deliverable 1's
target for its class: records merged (a later timing of a problem replaces an earlier one), the
class read from the reference (a product or a convolution: vendor library, at most 1.5x
torch.compile's time; otherwise Triton, at most 1.1x)."""
import json
import sys
from pathlib import Path

from tests.support.modules import load_module

_PATH = Path(__file__).parents[1] / "experiments" / "kernelbench_seeds_targets.py"

CONV = "import torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n        self.c = nn.Conv2d(3, 8, 3)\n"
LINEAR = "class Model(nn.Module):\n    def forward(self, x):\n        return self.fc(x)  # nn.Linear\n" \
         "    def __init__(self):\n        self.fc = nn.Linear(8, 8)\n"
PRODUCT = "def forward(self, a, b):\n    return a @ b\n"
POINTWISE = '"""Unlike torch.matmul, no product."""\ndef forward(self, x):\n    return x.relu()  # not torch.bmm\n'


def _module():
    return load_module(_PATH, "kernelbench_seeds_targets_under_test", compiled=False, register=True)


def _row(name, status="correct", vs_compiled=None, seed="seed", runtime=1.0, kernels=1):
    ev = {"status": status, "speedup_vs_compiled": vs_compiled, "runtime_ms": runtime, "device": "GPU",
          "per_kernel": [{"runtime_ms": runtime + i} for i in range(kernels - 1, -1, -1)]}
    return {"name": name, "level": name.split("/")[0], "path": "-", "seed": seed,
            "derive": {"seconds": 1.0}, "eval": ev}


def test_problems_are_classed_by_what_their_reference_calls():
    module = _module()
    assert [module.problem_class(s) for s in (CONV, LINEAR, PRODUCT, POINTWISE)] == \
        ["vendor", "vendor", "vendor", "triton"]


def test_a_later_timing_replaces_an_earlier_one_and_each_class_has_its_target(tmp_path, monkeypatch):
    module = _module()
    first = {"problems": [
        {**_row("level1/1_conv", vs_compiled=0.5), "source": CONV},  # 2x compile's time: a miss
        {**_row("level1/2_relu", status="not timed"), "source": POINTWISE},
        {**_row("level1/3_mm", vs_compiled=1 / 1.4, kernels=2), "source": PRODUCT}]}
    later = {"problems": [
        {**_row("level1/1_conv", vs_compiled=1 / 1.2, kernels=3), "source": CONV},  # timed again: 1.2x
        {**_row("level1/2_relu", vs_compiled=1 / 1.2), "source": POINTWISE},  # 1.2x: a Triton miss
        {**_row("level1/3_mm", status="not timed"), "source": PRODUCT}]}  # not timed: the earlier stays
    paths = []
    for i, record in enumerate((first, later)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(record))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["x", *map(str, paths), "--out", str(out)])
    module.main()
    text = (out / "seeds.md").read_text()
    assert "| triton | 1 | 1 | 1 | 1 | at most 1.1x | **0 of 1** (1.20-1.20x) | 1.200x |" in text
    assert "| vendor | 2 | 2 | 2 | 2 | at most 1.5x | **2 of 2** (1.20-1.40x) | 1.300x |" in text
    assert "Misses (1): level1/2_relu 1.20x" in text
    assert "| 1_conv | vendor | correct | 1.200x | yes | 3/3 |" in text  # the record kept the third kernel
    merged = json.loads((out / "seeds.json").read_text())["problems"]
    assert [r["class"] for r in merged] == ["vendor", "triton", "vendor"]
