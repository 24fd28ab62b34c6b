"""What a fused epilogue costs the seeds' Triton convolution, by how it finds a channel's parameters.

Operator ``fuse_epilogue`` folds inductor's pointwise kernel into the convolution's ``_epilogue``
as inductor wrote it: each element's channel worked out from its output offset
(``x1 = xindex // (H * W) % C``) and the channel's parameters gathered element by element.  In the
kernelbench-tolerance record of section 29, l2_10's convolution ran 5.89 ms with its bias fused so,
against 4.86 ms unfused (160 registers against 126), which cancelled the 1.1 ms pass it saved.
This probe times, side by side in one process, the convolution of two KernelBench shapes (TF32,
taps loop, channels-last gather) with:

- ``plain``: the library's epilogue (a store), then inductor's pointwise pass as its own kernel
  (``+pass``: both together);
- ``xindex``: the pass fused as ``fuse_epilogue`` writes it today;
- ``columns``: the pass fused with each channel parameter loaded once per column of the tile (the
  tile's output channels, handed to the epilogue) and broadcast over its rows.

    python3 experiments/conv_epilogue_probe.py --out $OUT/conv_epilogue.json

Medians of ``triton.testing.do_bench`` (L2 flushed between runs), one GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # conv_tile_probe
from conv_tile_probe import module_of  # noqa: E402

from evaluator.conv_library import module_text  # noqa: E402

_DEFAULT = "    tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)\n"

# the problems' pointwise passes after the convolution, as inductor writes them (x1: the channel)
BODIES = {
    # l2_10: the transposed convolution's bias (inductor passes bias=None and adds it here)
    "bias": ("tmp1 = tl.load(ep0_ptr + {ch}, {m}, eviction_policy='evict_last')\n"
             "tmp2 = acc + tmp1\n"
             "tl.store(out_ptr + {at}, tmp2, mask)\n"),
    # l2_1: the convolution's bias, ReLU, then the model's own bias of shape (C, 1, 1)
    "bias_relu_bias": ("tmp1 = tl.load(ep0_ptr + {ch}, {m}, eviction_policy='evict_last')\n"
                       "tmp2 = acc + tmp1\n"
                       "tmp3 = tl.full([1, 1], 0, tl.float32)\n"
                       "tmp4 = triton_helpers.maximum(tmp3, tmp2)\n"
                       "tmp5 = tl.load(ep1_ptr + {ch}, {m}, eviction_policy='evict_last')\n"
                       "tmp6 = tmp4 + tmp5\n"
                       "tl.store(out_ptr + {at}, tmp6, mask)\n"),
}


def variant_text(body: str | None, channels: int, spatial: int, columns: bool) -> str:
    """The library with its epilogue replaced: None keeps the store; else ``body`` with the channel
    found from each element's offset (inductor's way) or handed in per column."""
    text = module_text().replace('input_precision="ieee"', 'input_precision="tf32"')
    # the library's epilogue takes the tile's columns (cols, col_mask) since section 30; the data of
    # experiments/data/conv_epilogue_h200_s55.json came from commit 07190ec, whose probe added them
    assert _DEFAULT in text and "ep5_ptr, cols, col_mask):" in text, "the library changed"
    if body is None:
        return text
    if columns:
        lines = body.format(ch="cols", m="col_mask", at="offsets")
    else:
        lines = ("xindex = offsets.to(tl.int32)\n" f"x1 = xindex // {spatial} % {channels}\n"
                 + body.format(ch="x1", m="mask", at="xindex"))
    lines = lines.replace("triton_helpers.maximum", "tl.maximum")
    return text.replace(_DEFAULT, "".join(f"    {line}\n" for line in lines.splitlines()))


@triton.jit
def _bias_pass(io_ptr, b_ptr, c_ptr, n, S: tl.constexpr, C: tl.constexpr, TWO: tl.constexpr, BLOCK: tl.constexpr):
    # inductor's pointwise pass over the convolution's output: its bias, and (TWO) ReLU and a second bias
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    channel = offs // S % C
    v = tl.load(io_ptr + offs, mask) + tl.load(b_ptr + channel, mask, eviction_policy="evict_last")
    if TWO:
        v = tl.maximum(v, 0.0) + tl.load(c_ptr + channel, mask, eviction_policy="evict_last")
    tl.store(io_ptr + offs, v, mask)


CASES = {
    # name: (module, input shape, body, tiles)
    "l2_10": (lambda: torch.nn.ConvTranspose2d(64, 64, 3, stride=1, padding=1), (128, 64, 256, 256), "bias",
              [(128, 64, 16, 4, 3)]),
    "l2_1": (lambda: torch.nn.Conv2d(64, 128, 3), (128, 64, 128, 128), "bias_relu_bias",
             [(128, 64, 16, 4, 3), (128, 128, 32, 4, 3)]),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = True
    rows = []
    for name, (make, shape, body, tiles) in CASES.items():
        torch.manual_seed(0)
        module = make().cuda()
        x = torch.randn(shape, device="cuda")
        transposed = isinstance(module, torch.nn.ConvTranspose2d)
        second = torch.randn(module.out_channels, device="cuda")
        with torch.no_grad():
            ref = module(x)
            if body == "bias_relu_bias":
                ref = torch.relu(ref) + second[None, :, None, None]
        channels, spatial = ref.shape[1], ref.shape[2] * ref.shape[3]
        libs = {label: module_of(variant_text(None if label == "plain" else BODIES[body], channels, spatial,
                                              label == "columns"), f"conv_epilogue_{name}_{label}")
                for label in ("plain", "xindex", "columns")}

        def conv(lib, tile, epilogue=()):
            m, n, k, warps, stages = tile
            return lib._convolution(x, module.weight, None, module.stride, module.padding, module.dilation,
                                    transposed, module.output_padding if transposed else (0,), module.groups,
                                    epilogue=epilogue, block_m=m, block_n=n, block_k=k, num_warps=warps,
                                    num_stages=stages, taps_loop=True, channels_last=True)

        def with_pass(tile):
            out = conv(libs["plain"], tile)
            n = out.numel()
            _bias_pass[(triton.cdiv(n, 1024),)](out, module.bias, second, n, S=spatial, C=channels,
                                               TWO=body == "bias_relu_bias", BLOCK=1024)
            return out

        operands = (module.bias, second)
        calls = {"cudnn": lambda: module(x)}
        for tile in tiles:
            calls[f"plain {tile}"] = lambda t=tile: conv(libs["plain"], t)
            calls[f"plain+pass {tile}"] = lambda t=tile: with_pass(t)
            calls[f"xindex {tile}"] = lambda t=tile: conv(libs["xindex"], t, operands)
            calls[f"columns {tile}"] = lambda t=tile: conv(libs["columns"], t, operands)
        row = {"problem": name, "input": list(shape), "module": repr(module), "times": {}}
        scale = ref.abs().max().item()
        with torch.no_grad():
            for label, call in calls.items():
                out = call()
                err = None if label.startswith(("cudnn", "plain ")) else (out - ref).abs().max().item() / scale
                ms = triton.testing.do_bench(call, return_mode="median")
                row["times"][label] = {"ms": ms, "rel_err": err}
                print(f"{name} {label}: {ms:.3f} ms" + (f" (err {err:.1e})" if err is not None else ""), flush=True)
        rows.append(row)
        del ref, calls
        torch.cuda.empty_cache()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"command": " ".join(["python3", *sys.argv]), "device": torch.cuda.get_device_name(),
                                    "torch": torch.__version__, "triton": triton.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
