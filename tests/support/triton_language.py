"""``triton.language`` as it was before any kernel ran in Triton's interpreter in this process.

Triton 3.6's interpreter patches ``triton.language`` for a kernel's run and restores it after, but a
``@triton.jit`` function called outside a kernel patches it for good (``InterpretedFunction.__call__``
keeps no scope to restore).  A kernel compiled for the GPU later in the same process then fails in
code generation ("'ir.value' object has no attribute 'dtype'"): the suite's CPU tests run the
interpreter and its GPU tests compile, in one pytest worker."""
from __future__ import annotations

import triton.language as tl

# What the interpreter's patching touches (triton/runtime/interpreter.py, _patch_lang).
_PATCHED = (tl, tl.core, tl.math, tl.core.tensor, tl.core.dtype, tl.core.tensor_descriptor_base)
_ORIGINAL = [(owner, dict(vars(owner))) for owner in _PATCHED]


def restore() -> int:
    """Every attribute the interpreter set put back as it was; returns how many were."""
    restored = 0
    for owner, original in _ORIGINAL:
        for name, value in list(vars(owner).items()):
            if name not in original:
                delattr(owner, name)
                restored += 1
            elif value is not original[name]:
                setattr(owner, name, original[name])
                restored += 1
    return restored
