from pathlib import Path

import pytest

from evo.core.errors import TaskError
from evo.core.task import builtin_suites, load_task, load_tasks

EXPECTED = {"softmax", "layernorm", "rmsnorm", "gelu", "bias_gelu", "row_sum", "cross_entropy", "matmul_fp16"}


def test_builtin_suite_has_eight_tasks_each_with_a_seed():
    tasks = load_tasks("default")
    assert {t.name for t in tasks} == EXPECTED
    for task in tasks:
        assert len(task.seeds) == 1 and "class ModelNew" in task.seeds[0], task.name
        assert "class Model" in task.source


def test_single_builtin_task_and_subset():
    assert [t.name for t in load_tasks("softmax")] == ["softmax"]
    assert [t.name for t in load_tasks("default", names=["gelu", "softmax"])] == ["gelu", "softmax"]
    assert "softmax" in builtin_suites()


def test_unknown_names_are_reported():
    with pytest.raises(TaskError, match="unknown built-in suite"):
        load_tasks("nope")
    with pytest.raises(TaskError, match="no task named nope"):
        load_tasks("default", names=["nope"])


KERNELBENCH = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, a, b):
        return torch.relu(a + b)

batch_size = 16
dim = 1024

def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]

def get_init_inputs():
    return []
'''


def test_kernelbench_file_without_extensions_loads(tmp_path: Path):
    path = tmp_path / "19_ReLU.py"
    path.write_text(KERNELBENCH)
    task = load_task(path)
    assert task.name == "19_ReLU" and task.seeds == ()
    assert [t.name for t in load_tasks(path=str(tmp_path))] == ["19_ReLU"]


def test_seed_by_convention_and_by_declaration(tmp_path: Path):
    (tmp_path / "seeds").mkdir()
    (tmp_path / "a.py").write_text(KERNELBENCH)
    (tmp_path / "seeds" / "a.py").write_text("class ModelNew: pass\n")
    (tmp_path / "b.py").write_text(KERNELBENCH + '\nSEED = "kernels/my_seed.py"\n')
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "my_seed.py").write_text("class ModelNew: pass\n")
    tasks = {t.name: t for t in load_tasks(path=str(tmp_path))}
    assert tasks["a"].seeds == ("class ModelNew: pass\n",)
    assert tasks["b"].seeds == ("class ModelNew: pass\n",)


@pytest.mark.parametrize("content, message", [
    ("def broken(:\n", "not valid Python"),
    ("import torch\ndef get_inputs(): return []\n", "lacks Model, get_init_inputs"),
])
def test_malformed_task_files(tmp_path: Path, content, message):
    path = tmp_path / "bad.py"
    path.write_text(content)
    with pytest.raises(TaskError, match=message):
        load_task(path)


def test_missing_paths(tmp_path: Path):
    with pytest.raises(TaskError, match="task file not found"):
        load_task(tmp_path / "missing.py")
    with pytest.raises(TaskError, match="task path not found"):
        load_tasks(path=str(tmp_path / "missing"))
    with pytest.raises(TaskError, match="holds no problem files"):
        load_tasks(path=str(tmp_path))


def test_seed_without_model_new_is_rejected(tmp_path: Path):
    (tmp_path / "seeds").mkdir()
    (tmp_path / "a.py").write_text(KERNELBENCH)
    (tmp_path / "seeds" / "a.py").write_text("class Other: pass\n")
    with pytest.raises(TaskError, match="does not define class ModelNew"):
        load_task(tmp_path / "a.py")
