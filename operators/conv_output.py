"""Where an element sits in a seed's convolution output, as the convolution's call states its layout
(``_launch_K(..., out_size=(...), out_stride=(...))``, the layout inductor's wrapper asserted for
it): how many elements it holds densely, and which digit of an element's offset is its channel.
Operator ``fuse_epilogue`` (``operators/fuse_epilogue.py``) reads both.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass


def stated_layout(call: ast.Call) -> tuple[tuple, tuple] | None:
    """The call's literal ``out_size`` and ``out_stride``, of one length; None where it states none."""
    named = {k.arg: k.value for k in call.keywords}
    try:
        size, stride = (ast.literal_eval(named[k]) for k in ("out_size", "out_stride"))
    except (KeyError, ValueError, SyntaxError):
        return None
    return (size, stride) if len(size) == len(stride) else None


def dense_size(call: ast.Call) -> int | None:
    """The elements of the convolution's output where its call states a layout (``out_size``,
    ``out_stride``) that holds them densely, every offset below their count one element's; else None."""
    layout = stated_layout(call)
    if layout is None or any(n < 1 for n in layout[0]):
        return None
    expected = 1
    for n, step in sorted(zip(*layout), key=lambda d: (d[1], d[0])):
        if n > 1 and step != expected:
            return None
        expected *= n
    return expected


@dataclass(frozen=True)
class Channel:
    """Where an element's output channel sits in its offset into a dense output: ``offset // stride
    % count``; ``outermost``: no dimension of more than one element lies above it, so ``offset //
    stride`` alone is the channel too."""

    stride: int
    count: int
    outermost: bool

    def computed_by(self, expr: ast.expr, identity: set[str]) -> bool:
        """Whether ``expr`` is inductor's expression of the channel from ``xindex`` (or a name for it)."""
        def const(node, value):
            return isinstance(node, ast.Constant) and type(node.value) is int and node.value == value

        def index(node):
            return isinstance(node, ast.Name) and node.id in identity

        def divided(node):  # xindex // stride (xindex itself at stride 1)
            if self.stride == 1 and index(node):
                return True
            return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv) and index(node.left)
                    and const(node.right, self.stride))

        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mod) and const(expr.right, self.count):
            return divided(expr.left)
        return self.outermost and self.stride > 1 and divided(expr)


def channel_of(call: ast.Call) -> Channel | None:
    """Where the channel (dimension 1) sits in the offsets of the output the convolution's call
    states (dense: :func:`dense_size`); None where it states none."""
    layout = stated_layout(call)
    if layout is None or len(layout[0]) < 2:
        return None
    size, stride = layout
    above = [n for d, n in enumerate(size) if d != 1 and stride[d] > stride[1]]
    return Channel(int(stride[1]), int(size[1]), all(n == 1 for n in above))
