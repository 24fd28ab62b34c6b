"""The single-pass Triton comparison and digest (evaluator.compare_kernels) against the chunked
PyTorch path of evaluator.compare, through Triton's interpreter (on a GPU: the gpu-marked test)."""
import pytest
import torch

from evaluator import compare
from evaluator.compare_kernels import BLOCK, digest_of, mismatch_table

N = 2 * BLOCK + 123  # a partial last block


def _cases(dtype):
    g = torch.Generator().manual_seed(0)
    e = torch.randn(N, generator=g).to(dtype)
    close = e + (1e-6 if dtype == torch.float32 else 0)
    far = e.clone()
    far[N - 5] += 1.0
    far[17] += 0.5
    nan = e.clone()
    nan[BLOCK + 1] = float("nan")
    e_inf = e.clone()
    e_inf[3] = float("inf")
    a_inf_differs = e_inf.clone()
    a_inf_differs[3] = float("-inf")
    a_inf = e.clone()
    a_inf[N - 1] = float("inf")
    return [(e, e.clone()), (e, close), (e, far), (e, nan), (nan, e), (e_inf, e_inf.clone()),
            (e_inf, a_inf_differs), (e, a_inf)]


def _torch_path(e, a, atol, rtol):
    # the chunked path, as on the CPU
    return compare._value_mismatch(e.cpu(), a.cpu(), atol, rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_the_triton_comparison_says_what_the_chunked_one_says(dtype):
    atol, rtol = compare.DEFAULT_TOLERANCE[dtype]
    for e, a in _cases(dtype):
        table = mismatch_table(e, a, atol, rtol).cpu()
        assert compare._verdict(table, e, a, atol, rtol) == _torch_path(e, a, atol, rtol)


def test_the_worst_element_is_found_across_blocks():
    e = torch.zeros(N)
    a = e.clone()
    a[5], a[BLOCK + 7], a[N - 2] = 0.1, 0.3, 0.2
    table = mismatch_table(e, a, 1e-4, 1e-4)
    assert int(table[0, 3]) == 3 and int(table[0, 6]) == BLOCK + 7 and abs(float(table[0, 4]) - 0.3) < 1e-6
    assert "at flat index %d" % (BLOCK + 7) in compare._verdict(table, e, a, 1e-4, 1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.uint8, torch.int64])
def test_the_triton_digest_tells_every_bit(dtype):
    x = (torch.randn(N, generator=torch.Generator().manual_seed(1)) * 50).to(dtype)
    assert digest_of(x, False) == digest_of(x.clone(), False)
    flipped = x.clone()
    flipped.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])[N - 1] ^= 1
    assert digest_of(flipped, False) != digest_of(x, False)
    swapped = x.clone()
    swapped[[0, 1]] = x[[1, 0]]
    if x[0] != x[1]:
        assert digest_of(swapped, False) != digest_of(x, False)


def test_the_canonical_digest_sees_equal_values():
    x = torch.tensor([0.0, 1.0, float("nan"), 2.0])
    y = torch.tensor([-0.0, 1.0, -float("nan"), 2.0])
    assert digest_of(x, True) == digest_of(y, True)
    assert digest_of(x, False) != digest_of(y, False)


def _gpu_checks() -> None:
    """Compiled (not interpreted) kernels on the GPU agree with the chunked path."""
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        atol, rtol = compare.DEFAULT_TOLERANCE[dtype]
        for e, a in _cases(dtype):
            assert compare._value_mismatch(e.cuda(), a.cuda(), atol, rtol) == _torch_path(e, a, atol, rtol)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.uint8, torch.int64):
        x = (torch.randn(N, device="cuda") * 50).to(dtype)
        flipped = x.clone()
        flipped.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()])[7] ^= 1
        assert compare.digest(x) == compare.digest(x.clone()) and compare.digest(x) != compare.digest(flipped)
    print("compiled compare kernels agree")


@pytest.mark.gpu
def test_on_the_gpu_compare_takes_the_triton_path_and_agrees():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the compiled kernels
    out = subprocess.run([sys.executable, "-m", "tests.test_compare_kernels"], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and "agree" in out.stdout, out.stdout + out.stderr


def test_the_engines_kernels_are_not_counted_as_the_candidates():
    from evaluator.guards import attempted_launches, install_launch_counter, launch_count

    install_launch_counter()
    before = launch_count(), attempted_launches()
    x = torch.randn(N)
    mismatch_table(x, x.clone(), 1e-4, 1e-4)
    digest_of(x, True)
    assert (launch_count(), attempted_launches()) == before


if __name__ == "__main__":
    _gpu_checks()
