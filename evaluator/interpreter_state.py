"""What the reference, the timer and the checks depend on, taken before a candidate is imported and
compared after (runs in the sandbox).

The reference's outputs and its timing come from the process the candidate runs in.  A candidate
that replaced a PyTorch function the reference calls (reached through ``sys.modules`` and
``setattr``, with no assignment to see in its text) by one returning the same values 40 times more
slowly scored 23x where its kernel was worth 1.9x.  So :meth:`InterpreterState.capture` takes, before
the candidate's module is loaded, what a reference's ``forward`` reaches:

- the attributes of ``torch``, ``torch.nn.functional``, ``torch.Tensor`` (and its base), every
  ``torch.nn`` module class (and ``Module`` itself), ``torch.cuda``, ``torch.backends``, ``torch.linalg``,
  ``torch.fft``, ``torch.special``, ``torch._C._nn`` and ``torch._C._VariableFunctions``, ``triton`` and
  ``triton.language``, ``time``, ``math``, ``operator``, ``builtins``; the engine's own evaluator
  modules and their classes (the timer, the comparison, the checks); the task's module and its
  classes; and the reference instance's module tree (attributes, parameters and buffers);
- for every Python function among them, its code, defaults and closure;
- global hooks and switches: the ``nn.Module`` global hooks, trace and profile functions,
  ``sys.monitoring`` tools, the dispatch and function mode stacks, autocast, the backends' flags,
  the default dtype, deterministic algorithms, float32 matmul precision;
- the dispatcher tables of the operators the evaluation reaches (a kernel registered over PyTorch's
  own changes them; :mod:`evaluator.dispatcher_state` says which are read).

:meth:`InterpreterState.changes` names whatever differs since: the harness rejects the candidate.
Attributes added to a library's module (a submodule imported late, a cache) are not changes;
an attribute added to a class, to the task's module or to ``builtins`` is (it shadows another).
"""
from __future__ import annotations

import builtins
import math
import operator
import secrets
import sys
import threading
import time
import types

import torch

from evaluator.calls import Failure
from evaluator.dispatcher_state import tables_digest
from evaluator.result import Status

_MISSING = object()
_SCALARS = (int, float, bool, str, bytes, type(None))


def _namespaces() -> dict[str, object]:
    """Modules and classes whose attributes a reference, the timer or the checks look up."""
    import torch.nn.functional as functional

    spaces: dict[str, object] = {
        "torch": torch, "torch.nn.functional": functional, "torch.nn": torch.nn, "torch.cuda": torch.cuda,
        "torch.linalg": torch.linalg, "torch.fft": torch.fft, "torch.special": torch.special,
        "torch._C._nn": torch._C._nn, "torch._C._VariableFunctions": torch._C._VariableFunctions,
        "time": time, "math": math, "operator": operator, "builtins": builtins,
        "torch.nn.modules.module": sys.modules["torch.nn.modules.module"],
    }
    for name in ("triton", "triton.language", "torch.profiler", "torch.autograd.profiler"):
        if name in sys.modules:
            spaces[name] = sys.modules[name]
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.backends") and isinstance(module, types.ModuleType):
            spaces[name] = module
    return spaces


def _classes() -> dict[str, type]:
    """Classes whose own attributes (over their bases') a reference or the engine depends on."""
    found = {"torch.Tensor": torch.Tensor, "torch._C.TensorBase": torch._C.TensorBase,
             "torch.nn.Module": torch.nn.Module}
    for name, value in vars(torch.nn).items():
        if isinstance(value, type) and issubclass(value, torch.nn.Module):
            found[f"torch.nn.{name}"] = value
    if hasattr(torch.cuda, "Event"):
        found["torch.cuda.Event"] = torch.cuda.Event
    return found


def _engine_modules() -> dict[str, types.ModuleType]:
    """The evaluator's own modules loaded in this process: the timer, the comparison, the checks."""
    return {name: module for name, module in list(sys.modules.items())
            if name.startswith("evaluator.") and isinstance(module, types.ModuleType)}


def _function_parts(value) -> tuple | None:
    """What a Python function runs: its code, defaults and closure cells' contents (None: not one)."""
    # No getattr on an arbitrary value: a module's or an object's __getattr__ runs code (and may
    # initialise CUDA).
    function = value.__func__ if isinstance(value, (types.MethodType, classmethod, staticmethod)) else value
    if not isinstance(function, types.FunctionType):
        return None
    cells = tuple(_cell(c) for c in function.__closure__ or ())
    return function.__code__, function.__defaults__, _frozen(function.__kwdefaults__), cells


def _cell(cell) -> object:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell
        return _MISSING


def _frozen(mapping) -> tuple | None:
    return None if mapping is None else tuple((k, id(v)) for k, v in mapping.items())


def _contents(value) -> tuple | None:
    """A mutable container's contents, by identity (a hook added to a registry that stays the same object)."""
    if isinstance(value, dict):
        return tuple((k, id(v)) for k, v in list(value.items()))
    if isinstance(value, (list, set)):
        return tuple(sorted(id(v) for v in list(value)))
    return None


def _switches() -> dict[str, object]:
    """Global switches and hooks outside any namespace's attributes."""
    out = {
        "sys.gettrace()": sys.gettrace(), "sys.getprofile()": sys.getprofile(),
        "threading trace hook": getattr(threading, "_trace_hook", None),
        "threading profile hook": getattr(threading, "_profile_hook", None),
        "torch dispatch mode stack": torch._C._len_torch_dispatch_stack(),
        "torch function mode stack": torch._C._len_torch_function_stack(),
        # Dispatch keys forced on or off for this thread (the Python key, say, routes every operator).
        "the thread's included dispatch keys": str(torch._C._dispatch_tls_local_include_set()),
        "the thread's excluded dispatch keys": str(torch._C._dispatch_tls_local_exclude_set()),
        "torch.get_default_dtype()": torch.get_default_dtype(),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled(),
        "torch.get_num_threads()": torch.get_num_threads(),
        "sys.getswitchinterval()": sys.getswitchinterval(),
    }
    for device in ("cpu", "cuda"):
        try:
            out[f"torch.is_autocast_enabled({device!r})"] = torch.is_autocast_enabled(device)
        except TypeError:  # an older torch: one flag, for CUDA
            out["torch.is_autocast_enabled()"] = torch.is_autocast_enabled()
    backends = torch.backends
    for label, read in [
        ("torch.backends.cudnn.enabled", lambda: backends.cudnn.enabled),
        ("torch.backends.cudnn.benchmark", lambda: backends.cudnn.benchmark),
        ("torch.backends.cudnn.deterministic", lambda: backends.cudnn.deterministic),
        ("torch.backends.cudnn.allow_tf32", lambda: backends.cudnn.allow_tf32),
        ("torch.backends.cuda.matmul.allow_tf32", lambda: backends.cuda.matmul.allow_tf32),
        ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
         lambda: backends.cuda.matmul.allow_fp16_reduced_precision_reduction),
        ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
         lambda: backends.cuda.matmul.allow_bf16_reduced_precision_reduction),
        ("torch.backends.cuda.flash_sdp_enabled()", lambda: backends.cuda.flash_sdp_enabled()),
        ("torch.backends.cuda.mem_efficient_sdp_enabled()", lambda: backends.cuda.mem_efficient_sdp_enabled()),
        ("torch.backends.cuda.math_sdp_enabled()", lambda: backends.cuda.math_sdp_enabled()),
        ("torch.backends.mkldnn.enabled", lambda: backends.mkldnn.enabled),
    ]:
        try:
            out[label] = read()
        except Exception:  # noqa: BLE001 (a switch this build lacks)
            pass
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is not None:  # Python 3.12: a tool's callbacks run on the reference's own frames
        for tool in range(6):
            out[f"sys.monitoring tool {tool}"] = (monitoring.get_tool(tool), monitoring.get_events(tool))
    return out


def _module_tree(model: torch.nn.Module) -> dict[str, object]:
    """The reference's modules: each one's attributes, hooks, parameters and buffers, by identity."""
    out: dict[str, object] = {}
    for path, module in model.named_modules():
        where = f"the reference's module {path or '(root)'}"
        out[f"{where}: class"] = type(module)
        for key, value in vars(module).items():
            out[f"{where}.{key}"] = value
            contents = _contents(value)
            if contents is not None:
                out[f"{where}.{key} (contents)"] = contents
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if tensor is not None:
                out[f"{where}.{name} (storage, version)"] = (tensor.data_ptr(), tensor._version)
    return out


class InterpreterState:
    """A snapshot of what the reference, the timer and the checks depend on (see the module's text).

    Kept as references into the live namespaces (each module's and class's own ``__dict__``), so a
    comparison reads each attribute once and compares identities: a few milliseconds, no names
    built unless something changed."""

    def __init__(self, attributes: list[tuple], closed: list[tuple], others: dict[str, object], dispatcher: str,
                 operators: frozenset[str] | None):
        self._attributes = attributes  # (label, namespace, key, value, function parts or None, contents or None)
        self._closed = closed  # (label, namespace, its keys): namespaces where a new key is a change
        self._others, self._dispatcher, self._operators = others, dispatcher, operators

    @classmethod
    def capture(cls, task_module: types.ModuleType | None = None, reference: torch.nn.Module | None = None,
                dispatcher: bool = True, operators: frozenset[str] | None = None) -> "InterpreterState":
        """Taken before the candidate's module is loaded.  ``task_module``: the problem file's module;
        ``reference``: the reference instance; ``operators``: those whose dispatcher tables are read
        (None: every operator's)."""
        attributes: list[tuple] = []
        closed: list[tuple] = []
        engine = _engine_modules()
        spaces = {**_namespaces(), **engine}
        classes = dict(_classes())
        if task_module is not None:
            spaces[f"the task's module {task_module.__name__}"] = task_module
        for label, space in spaces.items():
            mine = label in engine or label.startswith("the task")  # classes defined there: their methods too
            namespace = _namespace(space)
            _take(attributes, label, namespace, classes,
                  own_module=getattr(space, "__name__", None) if mine else None, engine=label in engine)
            if label == "builtins" or label.startswith("the task"):  # a new name there shadows another
                closed.append((label, namespace, set(namespace)))
        for label, klass in classes.items():
            namespace = klass.__dict__  # a live view: an attribute added to a class shadows its bases'
            _take(attributes, label, namespace, {}, own_module=None)
            closed.append((label, namespace, set(namespace)))
        return cls(attributes, closed, _others(reference), tables_digest(operators) if dispatcher else "", operators)

    def changes(self, task_module=None, reference=None, dispatcher: bool = True) -> list[str]:
        """What differs from the snapshot, by name (empty: nothing); ``dispatcher=False`` skips the
        operators' tables (milliseconds; a tenth of a second when every operator's is read), for
        checks made often."""
        changed = []
        for label, namespace, key, before, parts, contents in self._attributes:
            now = namespace.get(key, _MISSING)
            if now is _MISSING and key not in namespace:
                changed.append(f"{label}.{key} (removed)")
            elif (now is not before and not _same(before, now)) or (
                    parts is not None and not _same(parts, _function_parts(now))) or (
                    contents is not None and contents != _contents(now)):
                changed.append(f"{label}.{key}")
        for label, namespace, keys in self._closed:
            changed += [f"{label}.{key} (added)" for key in namespace.keys() - keys]
        others = _others(reference)
        for key, before in self._others.items():
            if key not in others:
                changed.append(f"{key} (removed)")
            elif not _same(before, others[key]):
                changed.append(key)
        changed += [f"{key} (added)" for key in others.keys() - self._others.keys()]
        if dispatcher and self._dispatcher and tables_digest(self._operators) != self._dispatcher:
            changed.append("a PyTorch operator's dispatcher registrations (a kernel registered over PyTorch's)")
        return changed


def _others(reference) -> dict[str, object]:
    """The switches and, with a reference, its module tree: recomputed at each comparison."""
    out = dict(_switches())
    if reference is not None:
        out.update(_module_tree(reference))
    return out


class _ByName(dict):
    """A namespace without ``__dict__`` (a C extension's), read attribute by attribute."""

    def __init__(self, space):
        super().__init__({name: getattr(space, name, None) for name in dir(space) if not name.startswith("__")})
        self.space = space

    def get(self, key, default=None):
        return getattr(self.space, key, default)

    def keys(self):
        return {name for name in dir(self.space) if not name.startswith("__")}


def _namespace(space):
    """A module's or a class's own attributes, live where it has a ``__dict__``."""
    namespace = getattr(space, "__dict__", None)
    return namespace if namespace is not None else _ByName(space)


# Registries that stay the same object while hooks are added to them.
_REGISTRIES = ("torch.nn.modules.module._global_",)


def _take(attributes: list, label: str, namespace, classes: dict, own_module: str | None,
          engine: bool = False) -> None:
    for key, value in list(namespace.items()):
        if key in ("__dict__", "__weakref__", "__doc__", "__annotations__", "__builtins__", "__loader__",
                   "__spec__", "__cached__", "__file__"):
            continue
        if engine and isinstance(value, _SCALARS + (dict, list, set)) and not key.isupper():
            continue  # the engine's own state (launch counts, caches): what it computes, not what it runs
        full = f"{label}.{key}"
        contents = _contents(value) if full.startswith(_REGISTRIES) else None
        attributes.append((label, namespace, key, value, _function_parts(value), contents))
        if isinstance(value, type) and own_module and getattr(value, "__module__", None) == own_module:
            classes.setdefault(full, value)  # a class defined there (the engine's, the task's): its methods


def _same(before, after) -> bool:
    if before is after:
        return True
    if isinstance(before, _SCALARS) or isinstance(before, (tuple, torch.dtype)):
        return _equal(before, after)
    return False


def _equal(before, after) -> bool:
    if type(before) is not type(after):
        return False
    if isinstance(before, tuple):
        return len(before) == len(after) and all(_same(b, a) for b, a in zip(before, after))
    try:
        return bool(before == after)
    except Exception:  # noqa: BLE001
        return False


class StateWatch:
    """The snapshot of one evaluation and what it is compared with: the task's module and the
    reference instance, taken before the candidate's module is loaded (see the module's text)."""

    def __init__(self, task_module, reference, every: int = 4, during: int = 1,
                 operators: frozenset[str] | None = None):
        """``every``, ``during``: after a timing batch, compared with odds 1 in ``every``, drawn after the
        batch, up to ``during`` times an evaluation (a comparison costs milliseconds of the host's time);
        ``operators``: those whose dispatcher tables are read (:class:`evaluator.dispatcher_state.Recorder`)."""
        self.task_module, self.reference, self.every, self.during = task_module, reference, every, during
        self.operators = operators
        self.state = InterpreterState.capture(task_module, reference, operators=operators)

    def check(self, where: str, dispatcher: bool = False) -> None:
        """Rejects the candidate if anything changed since the snapshot; ``where``: when, for the reason."""
        changed = self.state.changes(self.task_module, self.reference, dispatcher=dispatcher)
        if changed:
            shown = ", ".join(changed[:6]) + (f" and {len(changed) - 6} more" if len(changed) > 6 else "")
            raise Failure(Status.REJECTED, f"{where}, the candidate had changed what the reference, the timer or "
                                           f"the checks depend on: {shown}")

    def sometimes(self) -> None:
        """After a timing batch: compared with odds 1 in ``every``, drawn now (nothing tells which)."""
        if self.during > 0 and secrets.randbelow(self.every) == 0:
            self.during -= 1
            self.check("during timing")

    def retake(self) -> None:
        """Taken again (after the engine's own change, such as inductor's compile of the baseline)."""
        self.state = InterpreterState.capture(self.task_module, self.reference, operators=self.operators)
