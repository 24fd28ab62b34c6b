"""The precision fp32 products run in for a request: references, baselines and candidates alike.

A worker serves many requests, so each sets it from its tolerance before it runs (``harness.handle``).
"""
from __future__ import annotations

import torch


def strict_fp32() -> None:
    """fp32 products in fp32, for references, baselines and candidates alike.

    PyTorch runs fp32 matrix products in full precision by default but convolutions in
    TF32 (cuDNN), about 5e-4 relative error: a reference computed that way misses the fp32
    tolerance (1e-4) against any exact kernel.  Off for both, a reference is exact fp32.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def pytorch_default_precision() -> None:
    """PyTorch's own defaults: fp32 matrix products in full precision, cuDNN's convolutions in TF32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True


def precision_for(tolerance: float | None) -> None:
    """The precision references, baselines and candidates run in, by the evaluation's tolerance.

    Strict (``tolerance`` None: the per-dtype defaults): exact fp32 (:func:`strict_fp32`).  A
    looser tolerance (``evaluator.tolerance=kernelbench``, which admits TF32 children): PyTorch's
    defaults, as KernelBench's harness and a user's ``torch.compile`` run them, so that eager and
    torch.compile are timed as users get them, convolutions in TF32 included.  Set for every
    request: a worker serves many."""
    if tolerance is None:
        strict_fp32()
    else:
        pytorch_default_precision()


def convolution_precision(tolerance: float | None) -> str:
    """The ``input_precision`` a seed's Triton convolution starts from: what cuDNN computes where
    the evaluation runs its references and baselines (:func:`precision_for`).  Strict: exact fp32
    (``ieee``).  Otherwise PyTorch's defaults, convolutions in TF32: in exact fp32 a convolution
    seed took 2.2-6.4x the time of the torch.compile it came from, and its first TF32 child spent
    one of the search's children on the move (experiments/kernelbench_search.md, section 15)."""
    return "ieee" if tolerance is None else "tf32"
