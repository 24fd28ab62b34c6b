"""How far two exact-fp32 convolutions drift apart on inputs scaled by 1e3 (the evaluator's
"very large values" check), on a GPU.

    python3 experiments/conv_precision_probe.py

For a few convolution shapes of KernelBench level 1, with inputs drawn as the problems draw
them (``torch.rand``) and scaled by 1 and by 1e3, prints the largest error over the
evaluator's allowance (fp32: 1e-4 + 1e-4 * |expected|) of

- cuDNN in fp32 (TF32 off, as the evaluator runs references) against float64,
- the seed's Triton convolution (``evaluator.conv_kernel``) against float64 and against cuDNN,
- two variants of it: the running sum kept in float64, and the reduction walked backwards.

A ratio above 1 fails the check.
"""
from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

import torch
import torch.nn as nn

import evaluator.conv_launch as conv_launch
from evaluator.conv_library import module_text

VARIANTS = {
    "fp64 sum": [("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)", "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)"),
                 ('acc += tl.dot(a, b, input_precision="ieee")', 'acc += tl.dot(a, b, input_precision="ieee").to(tl.float64)')],
    "reversed": [("offs_k = k0 + tl.arange(0, BLOCK_K)\n        k_mask = offs_k < K_total",
                  "offs_k = K_total - 1 - (k0 + tl.arange(0, BLOCK_K))\n        k_mask = offs_k >= 0")],
}


def variant(name: str):
    text = module_text()
    for old, new in VARIANTS[name]:
        assert old in text, old
        text = text.replace(old, new)
    path = Path(tempfile.mkdtemp()) / f"conv_{name.replace(' ', '_')}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._convolution


def over(actual: torch.Tensor, expected: torch.Tensor) -> float:
    err = (actual.double() - expected.double()).abs()
    return float((err / (1e-4 + 1e-4 * expected.double().abs())).max())


def main() -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    cases = [("level1/71 ConvTranspose2d 32->32 k3", nn.ConvTranspose2d(32, 32, 3), (2, 32, 128, 256)),
             ("level1/61 ConvTranspose3d 48->48 k3", nn.ConvTranspose3d(48, 48, 3), (2, 48, 24, 24, 24)),
             ("level1/63 Conv2d 16->128 k3", nn.Conv2d(16, 128, 3), (2, 16, 256, 256)),
             ("level1/55 Conv2d 64->128 k3", nn.Conv2d(64, 128, 3), (2, 64, 128, 256))]
    kernels = {"seed": conv_launch._convolution, **{name: variant(name) for name in VARIANTS}}
    print("| case | scale | cuDNN vs fp64 | " + " | ".join(f"{k} vs fp64 | {k} vs cuDNN" for k in kernels) + " |")
    for label, module, shape in cases:
        module = module.cuda()
        transposed = isinstance(module, (nn.ConvTranspose2d, nn.ConvTranspose3d))
        for scale in (1.0, 1e3):
            x = torch.rand(shape, device="cuda") * scale
            with torch.no_grad():
                exact = module.double()(x.double())
                module.float()
                ref = module(x)
                cells = [f"{over(ref, exact):.2f}"]
                for kernel in kernels.values():
                    out = kernel(x, module.weight, module.bias, module.stride, module.padding, module.dilation,
                                 transposed, getattr(module, "output_padding", (0,) * len(module.stride)), 1)
                    cells += [f"{over(out, exact):.2f}", f"{over(out, ref):.2f}"]
            print(f"| {label} | {scale:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
