"""The seeds' convolution as one text: the helpers the kernels share (``evaluator/conv_geometry.py``),
the Triton kernels of ``evaluator/conv_kernel.py`` and ``evaluator/conv_shifted.py``, the copies of
``evaluator/conv_copies.py``, then the host side of ``evaluator/conv_launch.py``, each below its
``# --- seed ---`` line.

A seed carries :func:`seed_text` (``evaluator.conv_seed.CONV_LIBRARY``) under its own imports;
:func:`module_text` is the same library as one self-contained module, which probes and tests load
and patch as they did when the library was one file, and which stands for this version of it
beside an older one:

    python3 -m evaluator.conv_library > .kbsrc/conv_before.py   # this version, for a later A/B
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
# in the order a seed carries them: what the kernels share, the kernels, then what launches them
PARTS = (HERE / "conv_geometry.py", HERE / "conv_kernel.py", HERE / "conv_shifted.py", HERE / "conv_copies.py",
         HERE / "conv_launch.py")
SEED_LINE = "# --- seed ---\n"
_IMPORTS = "import torch\nimport triton\nimport triton.language as tl\n"


def seed_text() -> str:
    """What a seed carries: each part below its seed line, in order."""
    return "\n\n".join(part.read_text().split(SEED_LINE, 1)[1].strip() + "\n" for part in PARTS)


def module_text() -> str:
    """The library as one module of its own: the imports the parts' seed text needs, then that text."""
    return f'"""The seeds\' Triton convolution as one module (evaluator.conv_library)."""\n{_IMPORTS}\n\n{seed_text()}'


def library_source(path: Path) -> str:
    """A version of the library as one module: this tree's where ``path`` is one of its parts, else
    the file at ``path`` (one written by ``python3 -m evaluator.conv_library``, or an older
    ``conv_kernel.py`` from before the split, which held the whole library)."""
    path = Path(path).resolve()
    return module_text() if path in {part.resolve() for part in PARTS} else path.read_text()


if __name__ == "__main__":
    sys.stdout.write(module_text())
