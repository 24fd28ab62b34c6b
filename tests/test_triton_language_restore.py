"""The suite's interpreted kernels leave ``triton.language`` as they found it (GPU tests compile
in the same pytest worker: tests/support/triton_language.py says why)."""
import triton
import triton.language as tl

from tests.support import triton_language


@triton.jit
def _plus_one(x):
    return x + 1


def test_a_jit_function_called_outside_a_kernel_leaves_the_language_patched_until_restored():
    originals = {name: getattr(tl, name) for name in ("range", "static_range", "multiple_of", "max_contiguous")}
    index = tl.core.tensor.__dict__.get("__index__")
    try:
        _plus_one(1)  # interpreted: patches triton.language and, in Triton 3.6 on, keeps it patched
    except Exception:  # noqa: BLE001 (outside a kernel the body may not run; the patching came first)
        pass
    if all(getattr(tl, n) is v for n, v in originals.items()):
        return  # a Triton that restores after itself: nothing to undo
    assert triton_language.restore() > 0
    assert all(getattr(tl, n) is v for n, v in originals.items())
    assert tl.core.tensor.__dict__.get("__index__") is index
    assert triton_language.restore() == 0  # nothing left to put back
