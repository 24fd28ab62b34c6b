"""Dispatch of a kernel library exported by evo: which kernel runs for a call.

Copied unchanged into every exported package; it needs only torch (and
triton, imported by the kernel modules).  ``manifest.json`` says, per task,
which kernel serves which device class and shape bucket.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import re
import types
from pathlib import Path

import torch


class _ReferenceDefault:
    """A parameter's default that is not a literal: the reference's ``Model.forward`` supplies it."""

    def __repr__(self) -> str:
        return "<the reference's default>"


DEFAULT = _ReferenceDefault()
_DROP = re.compile(r"^(nvidia|amd|\d+gb|hbm\d*e?|pcie|sxm\d*|nvl)$")


def device_class(name: str) -> str:
    """A device name without vendor, memory size and form factor: 'NVIDIA H100 80GB HBM3' -> 'h100'."""
    name = re.sub(r"\(.*?\)", " ", name.lower())
    if name.startswith("cpu"):
        return "cpu"
    words = [w for w in re.split(r"[\s_-]+", name) if w and not _DROP.match(w)]
    return "-".join(words) or name


def current_device_class(device: torch.device) -> str:
    if device.type == "cuda":
        return device_class(torch.cuda.get_device_name(device))
    return device_class(device.type)


@functools.lru_cache(maxsize=None)
def manifest() -> dict:
    return json.loads((Path(__file__).with_name("manifest.json")).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def reference(task: str) -> types.ModuleType:
    """The task's reference problem (``Model``, ``get_inputs``, ...) from the source embedded in its module."""
    task_module = importlib.import_module(f"{__package__}.{manifest()['tasks'][task]['module']}")
    module = types.ModuleType(f"{__package__}._reference_{task_module.__name__.rsplit('.', 1)[-1]}")
    exec(compile(task_module.REFERENCE_SOURCE, f"<reference of {task}>", "exec"), module.__dict__)
    return module


def _numel(values) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def kernel_for(task: str, inputs: list) -> str:
    """The kernel module serving these inputs, from the buckets of the current device class (or, if it
    has none, of the first class listed).

    A bucket serves inputs of up to ``max_numel`` elements (all input tensors together; None: any
    size): the smallest bucket that fits serves, and inputs larger than every bucket go to the largest.
    """
    buckets = manifest()["tasks"][task]["buckets"]
    device = next((v.device for v in inputs if isinstance(v, torch.Tensor)), torch.device("cpu"))
    classes = [b["device_class"] for b in buckets]
    here = current_device_class(device)
    candidates = [b for b in buckets if b["device_class"] == (here if here in classes else classes[0])]
    numel = _numel(inputs)
    ordered = sorted(candidates, key=lambda b: (b["max_numel"] is None, b["max_numel"] or 0))
    for bucket in ordered:
        if bucket["max_numel"] is None or numel <= bucket["max_numel"]:
            return bucket["kernel"]
    return ordered[-1]["kernel"]


@functools.lru_cache(maxsize=None)
def model(task: str, kernel: str, device: str) -> torch.nn.Module:
    """``ModelNew`` of one kernel module, built like the reference (seed 0, ``get_init_inputs()``)."""
    module = importlib.import_module(f"{__package__}.kernels.{kernel}")
    torch.manual_seed(0)
    return module.ModelNew(*reference(task).get_init_inputs()).to(device).eval()


def _with_defaults(task: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``DEFAULT`` arguments replaced with the defaults of the reference's ``Model.forward``."""
    if not any(v is DEFAULT for v in (*args, *kwargs.values())):
        return args, kwargs
    params = list(inspect.signature(reference(task).Model.forward).parameters.values())[1:]  # without self
    by_name = {p.name: p for p in params}
    args = tuple(params[i].default if v is DEFAULT else v for i, v in enumerate(args))
    return args, {k: by_name[k].default if v is DEFAULT else v for k, v in kwargs.items()}


def forward(task: str, *args, **kwargs):
    args, kwargs = _with_defaults(task, args, kwargs)
    inputs = [*args, *kwargs.values()]
    device = next((v.device for v in inputs if isinstance(v, torch.Tensor)), torch.device("cpu"))
    with torch.no_grad():
        return model(task, kernel_for(task, inputs), str(device))(*args, **kwargs)
