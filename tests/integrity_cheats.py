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
        "pytorch_after_n_calls": (_change(seed, _GELU_LAUNCH,
                                          _COUNT + "        if CALLS > 60:\n"
                                          "            return torch.nn.functional.gelu(x)\n" + _GELU_LAUNCH),
                                  "its own kernel for the first 60 calls (the checks), PyTorch's gelu after them"),
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
