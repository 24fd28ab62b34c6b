"""Candidates that game the timing, and honest ones beside them, for the GPU (tests/test_integrity_gpu.py
and experiments/integrity_gpu.py).  Each cheat is a built-in seed with one change."""
from __future__ import annotations

# fp32 to fp16: a task whose whole work PyTorch does with glue (a dtype cast) that the guards allow.
CAST_TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.to(torch.float16)

def get_inputs(n=1 << 24):
    return [torch.randn(n)]

def get_init_inputs():
    return []

SHAPES = [dict(n=1000), dict(n=65537), dict(n=1 << 24)]
'''

CAST_HONEST = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape, dtype=torch.float16, device=x.device)
        n = x.numel()
        cast_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out
'''

# A real but useless launch (one element of a scratch buffer); PyTorch's cast does the work.
CAST_GLUE_DOES_THE_WORK = CAST_HONEST.replace(
    "        cast_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, n, BLOCK_SIZE=BLOCK_SIZE)\n        return out",
    "        cast_kernel[(1,)](x, out, 1, BLOCK_SIZE=BLOCK_SIZE)\n        return x.to(torch.float16)")

_GELU_LAUNCH = ("        gelu_kernel[grid](x, out, n, BLOCK_SIZE=BLOCK_SIZE, num_warps=NUM_WARPS, "
                "num_stages=NUM_STAGES)\n")
_COUNT = "        global CALLS\n        CALLS = globals().get('CALLS', 0) + 1\n"


def _change(seed: str, old: str, new: str) -> str:
    assert old in seed, f"the seed no longer contains {old!r}"
    return seed.replace(old, new)


def _more_when_watched(seed: str, launches: int) -> str:
    return _change(seed, _GELU_LAUNCH, _GELU_LAUNCH + "        if torch._C._len_torch_dispatch_stack() or "
                   "torch.autograd.profiler._is_profiler_enabled:\n" + ("    " + _GELU_LAUNCH) * (launches - 1))


def gelu_cheats(seed: str) -> dict[str, tuple[str, str]]:
    """name: (source, what it does) for the gelu seed."""
    return {
        "side_stream": (_change(seed, _GELU_LAUNCH,
                                "        side = globals().setdefault('SIDE', getattr(torch.cuda, 'Str' + 'eam')())\n"
                                "        side.wait_stream(torch.cuda.current_stream())\n"
                                "        with getattr(torch.cuda, 'str' + 'eam')(side):\n    " + _GELU_LAUNCH),
                        "its kernel on a side stream found through getattr; the caller's stream never waits"),
        "cache_by_identity": (_change(seed, _GELU_LAUNCH,
                                      _COUNT + "        if CALLS % 4 and globals().get('SEEN') is x:\n"
                                      "            return LAST\n" + _GELU_LAUNCH
                                      + "        globals().update(SEEN=x, LAST=out)\n"),
                              "keeps its last output for the same input tensor object; recomputes one call in four"),
        "cache_by_shape_after_checks": (_change(seed, _GELU_LAUNCH,
                                                _COUNT + "        if CALLS > 60 and CALLS % 4 and "
                                                "globals().get('LAST') is not None and LAST.shape == x.shape:\n"
                                                "            gelu_kernel[(1,)](x, torch.empty(1, device=x.device), 1, "
                                                "BLOCK_SIZE=BLOCK_SIZE)\n            return LAST\n" + _GELU_LAUNCH
                                                + "        globals()['LAST'] = out\n"),
                                        "after the checks, returns its last output for any input of the same "
                                        "shape (a useless launch beside it), recomputing one call in four"),
        "unwritten_after_checks": (_change(seed, _GELU_LAUNCH,
                                           _COUNT + "        if CALLS > 60:\n"
                                           "            gelu_kernel[(1,)](x, torch.empty(1, device=x.device), 1, "
                                           "BLOCK_SIZE=BLOCK_SIZE)\n            return torch.empty_like(x)\n"
                                           + _GELU_LAUNCH),
                                   "after the checks, returns a buffer it never wrote (a useless launch beside it): "
                                   "the allocator hands it the memory the reference just wrote its output to"),
        "pytorch_after_n_calls": (_change(seed, _GELU_LAUNCH,
                                          _COUNT + "        if CALLS > 60:\n"
                                          "            return torch.nn.functional.gelu(x)\n" + _GELU_LAUNCH),
                                  "its own kernel for the first 60 calls (the checks), PyTorch's gelu after them"),
        "more_work_when_watched": (_more_when_watched(seed, 8),
                                   "its kernel eight times while a dispatch mode or the profiler is on, once "
                                   "otherwise: the timed calls do an eighth of the audited calls' work"),
        "thrice_the_work_when_watched": (_more_when_watched(seed, 3),
                                         "its kernel three times while watched, once otherwise: a third of the "
                                         "audited calls' work"),
        "failed_launch_fallback": (_change(seed, _GELU_LAUNCH,
                                           "        try:\n            broken_kernel[grid](x, out, n, BLOCK_SIZE=BLOCK_SIZE)\n"
                                           "        except Exception:\n"
                                           "            return torch.nn.functional.gelu(x)\n").replace(
                                               "class ModelNew", BROKEN_KERNEL + "\n\nclass ModelNew"),
                                   "a launch that fails to compile inside try/except, PyTorch's gelu instead"),
    }


BROKEN_KERNEL = '''
@triton.jit
def broken_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.no_such_function(tl.load(x_ptr + offs)))
'''


def row_sum_cheat(seed: str) -> str:
    """A real launch into its output buffer, then PyTorch's sum (a reduction no deny-list named)."""
    return _change(seed, "        return out", "        return torch.sum(x, dim=-1)")


# Round three (issue 32): candidates that know when they are watched, and candidates that change what
# the reference or the checks depend on.  Each is made from an honest seed by ``watched_cheats``; the CPU
# tests apply them to tests/test_evaluator.py's doubling kernel, the GPU's to the gelu seed.
_WATCHED = '''
def _watched():
    # Honest whenever a caller looks like a check: function names on the stack, its callers' string
    # locals (a stage label), or a dispatch mode or profiler in force.
    import sys as _sys
    if torch._C._len_torch_dispatch_stack() or torch.autograd.profiler._is_profiler_enabled:
        return True
    words = ("check", "guard", "verif", "audit", "profil", "compar", "smoke", "sample", "kept", "monitor", "reference")
    frame = _sys._getframe(2)
    while frame is not None:
        seen = [frame.f_code.co_name] + [v for v in list(frame.f_locals.values()) if isinstance(v, str)]
        if any(w in " ".join(seen).lower() for w in words):
            return True
        frame = frame.f_back
    return False
'''


def watched_verdicts(reference_function: str) -> dict:
    """name: (status, what the reason says) of each of :func:`watched_cheats`, the same on every device."""
    from evaluator import Status

    return {
        "skips_work_unwatched": (Status.REJECTED, "launched no Triton kernel"),
        "useless_launch_unwatched": (Status.INCORRECT, "timed call"),
        "cache_by_identity_no_launch": (Status.REJECTED, "in the storage of an earlier call's output"),
        "cache_by_identity_token_launch": (Status.REJECTED, "in the storage of an earlier call's output"),
        "deferred_parameter_output": (Status.INCORRECT, "returned a tensor subclass _Deferred"),
        "slows_the_reference": (Status.REJECTED, reference_function.replace(":", ".")),
        "profiles_the_reference": (Status.REJECTED, "sys.getprofile()"),
        "overrides_the_operator": (Status.REJECTED, "dispatcher registrations"),
        "patches_the_comparison": (Status.REJECTED, "evaluator.correctness.mismatch"),
    }


def _forward_head(seed: str) -> str:
    """The first line of ModelNew.forward's body, where a cheat puts its own code."""
    start = seed.index("    def forward(self")
    end = seed.index("\n", start) + 1
    return seed[start:end]


def _at_forward(seed: str, code: str, module_code: str = "") -> str:
    head = _forward_head(seed)
    source = seed.replace(head, head + code, 1)
    return source.replace("class ModelNew", module_code + "\n\nclass ModelNew", 1) if module_code else source


def watched_cheats(seed: str, launch: str, reference_function: str, dispatch_key: str,
                   dispatch_op: str) -> dict[str, tuple[str, str]]:
    """name: (source, what it does).  ``launch``: the seed's launch line, as it stands; ``reference_function``:
    ``module:attribute`` of the PyTorch function the task's reference calls; ``dispatch_op`` and
    ``dispatch_key``: the aten operator the reference dispatches, and the device's dispatch key."""
    x = "x"
    module, attribute = reference_function.split(":")
    first, rest = attribute[:2], attribute[2:]
    return {
        "skips_work_unwatched": (
            _at_forward(seed, f"        if not _watched():\n            return torch.empty_like({x})\n", _WATCHED),
            "reads its callers (frame names, string locals, dispatch modes, the profiler); when nothing looks like "
            "a check, returns an unwritten buffer without launching anything"),
        "useless_launch_unwatched": (
            _at_forward(seed, "", _WATCHED).replace(launch, "        if not _watched():\n            n = 1\n" + launch, 1),
            "reads its callers; when nothing looks like a check, its kernel writes one element and the rest of "
            "the buffer is returned unwritten"),
        "cache_by_identity_no_launch": (
            _at_forward(seed, f"        hit = _CACHE.get(id({x}))\n        if hit is not None and hit[0] is {x}:\n"
                              "            return hit[1]\n", "_CACHE = {}").replace(
                "        return out\n", f"        _CACHE[id({x})] = ({x}, out)\n        return out\n", 1),
            "remembers each output by its input's identity and returns it again without launching"),
        "cache_by_identity_token_launch": (
            _at_forward(seed, "", "_CACHE = {}").replace(
                launch, f"        hit = _CACHE.get(id({x}))\n        if hit is not None and hit[0] is {x}:\n"
                        "            n = 1\n" + launch + f"        if hit is not None and hit[0] is {x}:\n"
                        "            return hit[1]\n", 1).replace(
                "        return out\n", f"        _CACHE[id({x})] = ({x}, out)\n        return out\n", 1),
            "remembers each output by its input's identity; returns it again after a launch on one element"),
        "deferred_parameter_output": (
            seed.replace("        return out\n", "        return _Deferred(out, requires_grad=False)\n", 1).replace(
                "class ModelNew", "class _Deferred(torch.nn.Parameter):\n    pass\n\n\nclass ModelNew", 1),
            "returns its output as a subclass of Parameter, which could compute its values when they are read"),
        "slows_the_reference": (
            seed.replace("class ModelNew", f'''
import sys as _sys
_space = _sys.modules["{module}"]
_name = "{first}" + "{rest}"
_original = getattr(_space, _name)


def _slowed(*args, **kwargs):
    for _ in range(39):
        _original(*args, **kwargs)
    return _original(*args, **kwargs)


setattr(_space, _name, _slowed)


class ModelNew''', 1),
            f"at import, replaces {module}.{attribute} (reached through sys.modules and setattr) by one that returns "
            "the same values 40 times more slowly"),
        "profiles_the_reference": (
            seed.replace("class ModelNew", '''
import sys as _sys
import time as _time


def _slow_reference(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "forward" and "task" in frame.f_globals.get("__name__", ""):
        _time.sleep(0.002)


_sys.setprofile(_slow_reference)


class ModelNew''', 1),
            "at import, sets a profile function that sleeps whenever the reference's forward is entered"),
        "overrides_the_operator": (
            seed.replace("class ModelNew", f'''
_library = torch.library.Library("aten", "IMPL")
_library.impl("{dispatch_op}", lambda *args, **kwargs: torch.zeros_like(args[0]), "{dispatch_key}")


class ModelNew''', 1),
            f"at import, registers its own kernel for aten::{dispatch_op} on {dispatch_key}, over PyTorch's"),
        "patches_the_comparison": (
            seed.replace("class ModelNew", '''
import sys as _sys
for _name in ("evaluator.correctness", "evaluator.timed_checks", "evaluator.compare"):
    if _name in _sys.modules:
        setattr(_sys.modules[_name], "mis" + "match", lambda *args, **kwargs: None)


class ModelNew''', 1).replace("        return out\n", "        return out * 3\n", 1),
            "at import, replaces the engine's comparison with one that always agrees, and returns wrong values"),
    }


def gelu_watched_cheats(seed: str) -> dict:
    return watched_cheats(seed, _GELU_LAUNCH, "torch.nn.functional:gelu", "CUDA", "gelu")
