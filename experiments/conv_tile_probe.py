"""Which tile suits the seeds' Triton convolution (``evaluator/conv_kernel.py``) on real problems.

Every convolution module of the given KernelBench problem files is run once on its own inputs
(captured by a forward hook), then timed as cuDNN runs it (fp32 without TF32, as the strict
references run; ``--tolerance kernelbench``: TF32, PyTorch's default) and as ``_convolution`` runs it with each tile of a small grid, with fp32 products
exact (``ieee``, the seed's) and in three TF32 products (``tf32x3``, operator ``dot_precision``).
Each variant's output is compared with cuDNN's (max |diff| over max |ref|) so a tile that is fast
and wrong shows.

    python3 experiments/conv_tile_probe.py .kbsrc/search --out $OUT/conv_tiles.json [--only l1_62 ...]
    # two versions of the library side by side, each with the tile a seed starts from:
    python3 experiments/conv_tile_probe.py .kbsrc/search --out $OUT/ab.json --seed-tile \
        --library before=.kbsrc/conv_kernel_before.py --library now=evaluator/conv_kernel.py
    # a version for a later A/B: python3 -m evaluator.conv_library > .kbsrc/conv_kernel_before.py

Medians of ``triton.testing.do_bench`` (L2 flushed between runs), one process, one GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from evaluator.conv_library import library_source  # noqa: E402
from evaluator.conv_seed import seed_tile  # noqa: E402

# block_m, block_n, block_k, num_warps, num_stages; the first is the seeds' default today
TILES = [(64, 32, 32, 4, 2), (64, 64, 32, 4, 3), (128, 64, 32, 4, 3), (128, 64, 32, 8, 3), (128, 128, 32, 8, 3),
         (256, 64, 32, 8, 3), (128, 128, 16, 8, 4), (64, 16, 32, 4, 2)]
# one output channel a group (depthwise): the direct kernel, whose only tile is block_m positions a program
DIRECT_TILES = [(64, 32, 32, 4, 2), (256, 16, 32, 4, 2), (512, 16, 32, 4, 2), (1024, 16, 32, 4, 2),
                (1024, 16, 32, 8, 2), (2048, 16, 32, 8, 2)]
CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d,
         torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d)


HERE = Path(__file__).parents[1] / "evaluator" / "conv_kernel.py"


def library(precision: str, path: Path = HERE, label: str = "now"):
    """``path`` (a version of the library: this tree's ``evaluator/conv_kernel.py`` stands for the whole
    of it, ``evaluator.conv_library``) with its fp32 dots in ``precision``, as a module of its own file."""
    source = library_source(Path(path))
    if precision != "ieee":
        source = source.replace('input_precision="ieee"', f'input_precision="{precision}"')
    return module_of(source, f"conv_{label}_{precision}")


def module_of(source: str, name: str):
    """``source`` as a module of its own file (Triton reads a kernel's source from its file)."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def captured_convolutions(path: Path) -> list[tuple[torch.nn.Module, torch.Tensor]]:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    problem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(problem)
    torch.manual_seed(0)
    model = problem.Model(*problem.get_init_inputs()).cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    seen = []
    hooks = [m.register_forward_hook(lambda m, args, out: seen.append((m, args[0].detach())))
             for m in model.modules() if isinstance(m, CONVS)]
    with torch.no_grad():
        model(*inputs)
    for hook in hooks:
        hook.remove()
    return seen


def transposed(module) -> bool:
    return isinstance(module, (torch.nn.ConvTranspose1d, torch.nn.ConvTranspose2d, torch.nn.ConvTranspose3d))


def run_tile(lib, module, x, tile, variant: str = "ieee"):
    m, n, k, warps, stages = tile
    flipped = transposed(module)
    return lambda: lib._convolution(x, module.weight, module.bias, module.stride, module.padding, module.dilation,
                                    flipped, module.output_padding if flipped else (0,), module.groups,
                                    block_m=m, block_n=n, block_k=k, num_warps=warps, num_stages=stages,
                                    **gather(variant))


def gather(variant: str) -> dict:
    """``_convolution``'s switches a variant names after its precision: ``-cl`` channels-last;
    ``-taps`` / ``-general`` the taps or the general reduction loop (else the library's choice);
    ``split``, three TF32 products of operands split as they are copied (with the library's IEEE text);
    ``-shift`` shifted windows over a padded channels-last copy (TMA; stride 1, or transposed with
    a stride, a launch a phase)."""
    name, *flags = variant.split("-")
    kwargs = {"channels_last": True} if "cl" in flags else {}
    if "shift" in flags:
        kwargs["shifted"] = True
    if "taps" in flags or "general" in flags:
        kwargs["taps_loop"] = "taps" in flags
    return {**kwargs, "split": True} if name == "split" else kwargs


def dots(variant: str) -> str:
    """The precision a variant's library text puts in its dots (``split`` keeps the IEEE ones)."""
    name = variant.split("-")[0]
    return "ieee" if name == "split" else name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="*", default=None, help="file name prefixes")
    parser.add_argument("--deadline", type=float, default=500.0, help="seconds; the rest is skipped")
    parser.add_argument("--library", action="append", default=None,
                        help="LABEL=PATH, a version of the library (repeatable; default: this tree's, "
                             "evaluator/conv_kernel.py standing for the whole of it)")
    parser.add_argument("--precisions", default="ieee,tf32x3",
                        help="comma-separated: ieee, tf32x3, tf32 (the dots' precision) or split (three TF32 "
                             "products of operands split in memory), each with -cl for the channels-last gather and "
                             "-taps or -general for the reduction loop (split-cl-taps, say)")
    parser.add_argument("--tolerance", choices=("strict", "kernelbench"), default="strict",
                        help="strict: cuDNN without TF32, a variant counts within 1e-4 of its output; kernelbench: "
                             "cuDNN in PyTorch's defaults (TF32), within 1e-2 (TF32 variants count)")
    parser.add_argument("--seed-tile", action="store_true",
                        help="only the tile a seed starts from (evaluator.conv_seed.seed_tile), not the grid")
    parser.add_argument("--tile", action="append", default=None, metavar="M,N,K,WARPS,STAGES",
                        help="tiles of your own in place of the grid (repeatable); the first stands as the default")
    args = parser.parse_args()
    own = [tuple(int(v) for v in spec.split(",")) for spec in args.tile] if args.tile else None
    if own and any(len(tile) != 5 for tile in own):
        parser.error("--tile takes five numbers: block_m,block_n,block_k,num_warps,num_stages")
    torch.backends.cudnn.allow_tf32 = args.tolerance == "kernelbench"  # PyTorch's default is True
    torch.backends.cuda.matmul.allow_tf32 = False
    bound = 1e-2 if args.tolerance == "kernelbench" else 1e-4
    versions = dict(spec.split("=", 1) for spec in args.library) if args.library else {"now": str(HERE)}
    made = {}
    for label, path in versions.items():
        for p in args.precisions.split(","):
            if (label, dots(p)) not in made:
                made[(label, dots(p))] = library(dots(p), Path(path), label)
    libs = {(label, p): made[(label, dots(p))] for label, path in versions.items() for p in args.precisions.split(",")}
    began, rows = time.monotonic(), []
    files = sorted(p for p in args.folder.glob("*.py") if "conv" in p.name.lower())
    if args.only:
        files = [p for p in files if any(p.name.startswith(o) for o in args.only)]
    for path in files:
        if time.monotonic() - began > args.deadline:
            rows.append({"problem": path.stem, "skipped": "deadline"})
            continue
        try:
            convs = captured_convolutions(path)
        except Exception as exc:  # noqa: BLE001 (a problem too large for the probe, say)
            rows.append({"problem": path.stem, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
            continue
        for index, (module, x) in enumerate(convs):
            with torch.no_grad():
                ref = module(x)
                cudnn_ms = triton.testing.do_bench(lambda: module(x), return_mode="median")
                scale = ref.abs().max().item() or 1.0
                direct = module.out_channels // module.groups == 1
                row = {"problem": path.stem, "conv": index, "module": repr(module)[:160],
                       "input": list(x.shape), "cudnn_ms": cudnn_ms, "tiles": []}
                tiles = [seed_tile(tuple(module.weight.shape), transposed(module), module.groups,
                                   strided=any(int(v) > 1 for v in module.stride),
                                   precision="ieee" if args.tolerance == "strict" else "tf32")] if args.seed_tile \
                    else own or (DIRECT_TILES if direct else TILES)
                for (label, precision), lib in libs.items():
                    for tile in tiles:
                        call = run_tile(lib, module, x, tile, precision)
                        try:
                            err = (call() - ref).abs().max().item() / scale
                            ms = triton.testing.do_bench(call, return_mode="median")
                        except Exception as exc:  # noqa: BLE001 (out of shared memory for a large tile)
                            row["tiles"].append({"library": label, "precision": precision, "tile": tile,
                                                 "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
                            continue
                        row["tiles"].append({"library": label, "precision": precision, "tile": tile, "ms": ms,
                                             "rel_err": err})
            ok = [t for t in row["tiles"] if "ms" in t and t["rel_err"] < bound]
            default = next((t for t in row["tiles"] if t["tile"] == tiles[0]), {})
            best = min(ok, key=lambda t: t["ms"]) if ok else None
            row["default_over_cudnn"] = default.get("ms", float("nan")) / cudnn_ms
            row["best"] = best
            said = f"{best['ms']:.3f} ms {best['library']} {best['precision']} {best['tile']}" if best else "none"
            print(f"{path.stem}[{index}] cudnn {cudnn_ms:.3f} ms, default {default.get('ms', float('nan')):.3f}, "
                  f"best {said}", flush=True)
            for label in versions if len(versions) > 1 else ():
                mine = [t for t in ok if t["library"] == label]
                if mine:
                    fastest = min(mine, key=lambda t: t["ms"])
                    row[f"{label}_ms"] = fastest["ms"]
                    print(f"  {label}: {fastest['ms']:.3f} ms ({fastest['precision']}), "
                          f"{fastest['ms'] / cudnn_ms:.2f}x cuDNN's", flush=True)
            rows.append(row)
            del ref
        torch.cuda.empty_cache()
        write(args, versions, rows)  # after each problem: a call cut short keeps what it measured
    write(args, versions, rows)


def write(args, versions: dict, rows: list) -> None:
    meta = {"command": " ".join(["python3", *sys.argv]), "device": torch.cuda.get_device_name(),
            "torch": torch.__version__, "triton": triton.__version__, "tiles": TILES, "direct_tiles": DIRECT_TILES,
            "libraries": versions, "seed_tile": args.seed_tile, "tolerance": args.tolerance}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
