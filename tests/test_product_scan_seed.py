"""A seed's running product (inductor's cumprod) runs in float64: in fp32, inductor's block-wise scan
multiplies one block's underflowed prefix (0) by the next block's overflowed product (Inf), NaN where
the product in order is 0 (evaluator.compile_seed._products_in_float64).  The kernel is the looped
scan inductor generated for a cumulative sum (tests/data/kernelbench_like/inductor/, captured on an
H100), its combine turned into a product as inductor writes cumprod's."""
from pathlib import Path

import pytest
import torch

from evaluator.compile_seed import convert_kernel, kernels_of

INDUCTOR = Path(__file__).parent / "data" / "kernelbench_like" / "inductor" / "attention_cumsum.py.txt"


def scan_kernel(product: bool) -> str:
    name, source = next((n, s) for n, s in kernels_of(INDUCTOR.read_text()) if "cumsum" in n)
    if product:
        source = source.replace("_triton_helper_fn_add0", "_triton_helper_fn_mul0").replace(
            "arg0_0 + arg1_0", "arg0_0 * arg1_0").replace("tmp3 + tmp", "tmp3 * tmp")
    return source


def converted(product: bool) -> str:
    constants, kernel, launcher = convert_kernel(0, "scan", scan_kernel(product))
    return "\n\n".join([constants, kernel, launcher])


def test_a_product_scan_and_its_carry_widen_a_sum_scan_does_not():
    product = converted(product=True)
    assert "tl.associative_scan((tmp2.to(tl.float64),), 1, _k0_triton_helper_fn_mul0)" in product
    assert "float('nan'), tl.float64)" in product and "tl.float32)" not in product.split("tmp1 =")[0]
    total = converted(product=False)
    assert "tl.float64),)" not in total and "float('nan'), tl.float32)" in total
    warps = [line for line in product.splitlines() if line.startswith("K0_NUM_WARPS = ")]
    assert warps == [f"K0_NUM_WARPS = {min(4, int(total.split('K0_NUM_WARPS = ')[1].split()[0]))}"]


def run(text: str, x: torch.Tensor, path: Path) -> torch.Tensor:
    """The converted kernel on ``x`` (rows x columns), scanned down its columns, 8 rows a block."""
    import triton
    import triton.language as tl
    from torch._inductor.runtime import triton_helpers

    namespace = {"triton": triton, "tl": tl, "triton_helpers": triton_helpers}
    path.write_text(text)  # Triton's interpreter reads a jitted function's source from its file
    exec(compile(text, str(path), "exec"), namespace)
    namespace.update(K0_ROWS_PER_PROGRAM=1, K0_BLOCK_R0=8)
    out = torch.empty_like(x)
    rows, columns = x.shape
    namespace["_launch_0"](x, out, columns, rows, columns, rows)
    return out


@pytest.mark.skipif(__import__("os").environ.get("TRITON_INTERPRET") != "1", reason="runs in Triton's interpreter")
def test_a_product_that_leaves_fp32s_range_gives_the_float64_answer(tmp_path):
    column = torch.tensor([1e-20] * 8 + [1e20] * 8)  # the first block's prefix underflows, the second's overflows
    x = torch.stack([column, torch.full((16,), 0.5), column.flip(0), torch.linspace(0.5, 2.0, 16)], 1)
    for name, product in (("fp32", False), ("f64", True)):
        text = converted(product=True)
        if not product:  # the kernel as inductor wrote it, unwidened
            text = text.replace(".to(tl.float64),)", ",)").replace("tl.float64)", "tl.float32)")
        out = run(text, x, tmp_path / f"{name}.py")
        if product:
            assert torch.equal(out, torch.cumprod(x.double(), 0).float())
            assert not out.isnan().any()
        else:
            assert out.isnan().any()  # 0 x Inf between the blocks
