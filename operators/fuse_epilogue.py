"""Offline fusion of two launches: a pointwise kernel folded into the convolution that produced its input.

Needs no LLM.  Where inductor calls cuDNN for a convolution, the seed runs the engine's Triton
convolution (``evaluator/conv_kernel.py``; its ``_epilogue`` in ``conv_geometry.py``) and then
inductor's own pointwise kernel over its output (the bias, activations, a batch norm's affine map:
``triton_poi_*``), which reads the whole output back from memory and writes it again.  The child
runs that kernel's body in the convolution's epilogue instead, on the tile in registers: the
library's ``_epilogue`` (which only stores the tile) takes the kernel's body, its other tensors go
in as the convolution's ``epilogue=`` operands, and the kernel's launch, launcher, kernel and
tunable constants go.  One output round trip saved: 2 x 4 bytes an element in fp32 (0.94 GB on l2_7
of the KernelBench sample).

Correct by construction, as far as the rewrite reaches: the kernel's index ``xindex`` is an element's
offset into the convolution's output (it reads that output at ``xindex`` and nowhere else), so in
the epilogue ``xindex`` becomes the tile's own output offsets (int32 where the output's size allows,
as inductor's is), ``xmask`` the tile's mask, and the
load of the output the tile's values, cast as the output stores them.  An index that is the
element's channel by the output's layout (``x1 = xindex // 4096 % 16``: the channel's stride and
count) becomes the tile's columns (``cols``, its output channels), and a load at it is masked with
theirs: a channel's parameters are loaded once a column, not gathered once an element, which on one
H200 made the fused epilogue nearly free (l2_1's convolution 2.13 ms with its epilogue so, 4.03 as
gathered, 2.63 with the pass as a kernel of its own: ``kernelbench_search.md``, section 30).  Every
other index, load and store follows unchanged, masked with the tile's mask.  Refused: a kernel other than inductor's pointwise one (a reduction, a
template), one with scalars besides ``xnumel`` or an ``xnumel`` other than the output's size, one
that reads the output elsewhere than at ``xindex`` or reads ``XBLOCK``/``xoffset`` in its body, a
store other than at ``xindex``, a store into another buffer while the output is read afterwards,
more than six other tensors, a launch that is not the next statement after the convolution (bar
aliases, allocations and ``del``), and a parent whose epilogue already holds one (the library has one
``_epilogue``; a seed with two convolutions gets one fusion).
"""
from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass

import numpy as np

from evo.core.kernel_facts import grid_launches, top_level_kernels
from evo.core.kernel_source import find_tunables, parse, with_values
from operators.base import Context, Operator, Proposal
from operators.conv_output import Channel, channel_of, dense_size

_OPERANDS = 6  # the library's ep0_ptr ... ep5_ptr
_NONE = ("no convolution whose output a pointwise kernel reads next "
         "(`bufN = _launch_K(...)` then `_launch_J(bufN, ...)`)")
_DEFAULT_EPILOGUE = "tl.store(out_ptr + offsets, acc.to(out_ptr.dtype.element_ty), mask=mask)"
_HEADER = {"xoffset = tl.program_id(0) * XBLOCK", "xindex = xoffset + tl.arange(0, XBLOCK)[:]",
           "xmask = xindex < xnumel", "xmask = tl.full([XBLOCK], True, tl.int1)[:]"}
_EPILOGUE_NAMES = {"acc", "out_ptr", "offsets", "mask", "cols", "col_mask"} | {f"ep{i}_ptr" for i in range(_OPERANDS)}
# the library's epilogue parameters past the ep*_ptr operands: the tile's output channels and their mask
# (a library from before they were added, in a resumed run's parents, lacks them)
_COLUMNS = ("cols", "col_mask")


@dataclass
class _Fusion:
    conv: ast.Assign  # bufB = _launch_K(...) in _call
    consumer: ast.Expr  # _launch_J(...) in _call
    moved: list[ast.stmt]  # allocations between the two that the consumer's operands need before the conv
    operands: list[str]  # the consumer's other tensors, in its parameters' order: the conv's epilogue=
    epilogue: str  # the library's new _epilogue
    dropped: list[ast.stmt]  # module-level statements that go: the consumer's kernel, launcher, constants
    kernel: str
    prefix: str  # the convolution's tunable constants: K1_


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _called(stmt: ast.stmt) -> str | None:
    call = stmt.value if isinstance(stmt, (ast.Expr, ast.Assign)) else None
    return call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None


def _conv_launchers(tree: ast.Module) -> set[str]:
    """Launchers of the library's convolution: ``def _launch_K(*args, **kwargs): return _convolution(...)``."""
    out = set()
    for fn in tree.body:
        if (isinstance(fn, ast.FunctionDef) and len(fn.body) == 1 and isinstance(fn.body[0], ast.Return)
                and isinstance(fn.body[0].value, ast.Call) and ast.unparse(fn.body[0].value.func) == "_convolution"):
            out.add(fn.name)
    return out


def _statements(call_fn: ast.FunctionDef) -> list[list[ast.stmt]]:
    """The blocks of ``_call`` the wrapper's launches sit in: its body and ``if True:`` bodies."""
    blocks = [call_fn.body]
    blocks += [s.body for s in ast.walk(call_fn) if isinstance(s, ast.If) and ast.unparse(s.test) == "True"]
    return blocks


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


class _Renamer(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]):
        self.names = names

    def visit_Name(self, node: ast.Name):
        return ast.copy_location(ast.Name(self.names.get(node.id, node.id), node.ctx), node)


def _access(call: ast.Call) -> tuple[str, ast.expr] | None:
    """A ``tl.load``/``tl.store``'s pointer as (pointer parameter, index), where it is ``P + (index)``."""
    pointer = call.args[0] if call.args else None
    if not (isinstance(pointer, ast.BinOp) and isinstance(pointer.op, ast.Add) and isinstance(pointer.left, ast.Name)):
        return None
    return pointer.left.id, pointer.right


def _accesses(node) -> list[ast.Call]:
    return [c for c in ast.walk(node) if isinstance(c, ast.Call) and ast.unparse(c.func) in ("tl.load", "tl.store")]


def _masked(call: ast.Call, mask: str = "mask") -> ast.Call:
    """The access with the tile's mask (or ``mask``): the positional mask or ``mask=`` replaced, or added."""
    call = ast.Call(call.func, list(call.args), [k for k in call.keywords if k.arg != "mask"])
    position = 1 if ast.unparse(call.func) == "tl.load" else 2
    if len(call.args) > position:
        call.args[position] = ast.Name(mask, ast.Load())
    else:
        call.keywords.append(ast.keyword("mask", ast.Name(mask, ast.Load())))
    return call


class _Replace(ast.NodeTransformer):
    def __init__(self, old: ast.AST, new: ast.AST):
        self.old, self.new = old, new

    def visit(self, node):
        return self.new if node is self.old else super().visit(node)


def _epilogue_body(kernel: ast.FunctionDef, output: str, others: list[str], numel: int,
                   channel: Channel | None = None) -> list[str] | str:
    """The pointwise ``kernel``'s body as the library's epilogue's, where its parameter ``output`` is
    the convolution's output and ``others`` its other tensors; ``channel``: where the output's
    channel sits in an element's offset, for an epilogue that takes the tile's columns (else None);
    a reason where it must be refused."""
    name, body = kernel.name, copy.deepcopy(kernel.body)  # rewritten in place below
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # a docstring
    numels = [s for s in body if isinstance(s, ast.Assign) and ast.unparse(s.targets) == "xnumel"]
    if len(numels) != 1 or not isinstance(numels[0].value, ast.Constant) or numels[0].value.value != numel:
        return f"{name}: xnumel is not a literal {numel}, the convolution output's size"
    statements, identity, columns, stores = [], {"xindex"}, set(), 0
    for stmt in body:
        if stmt is numels[0] or ast.unparse(stmt) in _HEADER:
            continue
        assigned = {t.id for t in ast.walk(stmt) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
        if (not isinstance(stmt, (ast.Assign, ast.Expr)) or assigned & _EPILOGUE_NAMES
                or _names(stmt) & {"XBLOCK", "xoffset", "xnumel"}):
            return f"{name}: a statement the epilogue cannot take: {ast.unparse(stmt)[:80]}"
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and ast.unparse(stmt.value) in identity:
            identity.add(ast.unparse(stmt.targets[0]))
        if (channel is not None and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and channel.computed_by(stmt.value, identity)):
            columns.add(stmt.targets[0].id)  # the element's channel: the tile's columns
            statements.append(ast.Assign([stmt.targets[0]], ast.Name("cols", ast.Load())))
            continue
        calls = _accesses(stmt)
        if len(calls) > 1:
            return f"{name}: more than one load or store in a statement"
        if not calls:
            if isinstance(stmt, ast.Expr) or output in _names(stmt):
                return f"{name}: a statement the epilogue cannot take: {ast.unparse(stmt)[:80]}"
            statements.append(stmt)
            continue
        call, = calls
        access = _access(call)
        if access is None or _names(call.args[0]) - {access[0]} - _names(access[1]):
            return f"{name}: a load or store not at `pointer + (index)` of one parameter"
        pointer, index = access
        at_output = ast.unparse(index).strip("()") in identity
        if ast.unparse(call.func) == "tl.store":
            if not (isinstance(stmt, ast.Expr) and stmt.value is call):
                return f"{name}: a store inside an expression"
            if pointer == output and not at_output:
                return f"{name}: it writes the convolution's output elsewhere than at xindex"
            stores += 1
            statements.append(ast.Expr(_masked(call)))
            continue
        if pointer == output:
            if not at_output:
                return f"{name}: it reads the convolution's output elsewhere than at xindex"
            new = ast.parse("acc.to(out_ptr.dtype.element_ty)", mode="eval").body
        else:  # a channel's parameter once a column, anything else once an element
            new = _masked(call, "col_mask" if ast.unparse(index).strip("()") in columns else "mask")
        statements.append(_Replace(call, new).visit(stmt))
    if not stores:
        return f"{name}: it stores nothing"
    renames = {"xmask": "mask", output: "out_ptr", **{p: f"ep{i}_ptr" for i, p in enumerate(others)}}
    # the library's offsets are int64; inductor's xindex is int32 where the size allows, and its
    # divisions by the output's dimensions (x1 = xindex // 4096 % 16) cost several times as much in
    # int64 (on two H200s, l2_82's child ran at 3.2x its parent's time with them: section 18)
    index = "offsets.to(tl.int32)" if numel < 2 ** 31 else "offsets"
    return [f"xindex = {index}"] + [ast.unparse(ast.fix_missing_locations(_Renamer(renames).visit(stmt)))
                                    for stmt in statements]


def _stored(kernel: ast.FunctionDef) -> set[str]:
    """The pointer parameters ``kernel`` stores through."""
    return {(_access(c) or ("",))[0] for c in _accesses(kernel) if ast.unparse(c.func) == "tl.store"}


def _fusion(tree: ast.Module) -> _Fusion | str:
    """The fusion this operator would make in the module ``tree``, or why none."""
    library = _function(tree, "_epilogue")
    call_fn = _function(tree, "_call")
    convs = _conv_launchers(tree)
    if library is None or call_fn is None or not convs:
        return _NONE
    if [ast.unparse(s) for s in library.body] != [_DEFAULT_EPILOGUE]:
        return "the convolution's epilogue already holds a fused kernel"
    refusals = []
    for block in _statements(call_fn):
        for i, stmt in enumerate(block):
            if not (isinstance(stmt, ast.Assign) and _called(stmt) in convs and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                continue
            found = _fusion_after(tree, call_fn, block, i)
            if isinstance(found, _Fusion):
                return found
            refusals.append(found)
    return "; ".join(refusals) or _NONE


def _fusion_after(tree: ast.Module, call_fn: ast.FunctionDef, block: list[ast.stmt], i: int) -> _Fusion | str:
    conv = block[i]
    numel = dense_size(conv.value)
    if numel is None:
        return f"{conv.targets[0].id}: the convolution's call states no dense layout (out_size, out_stride)"
    aliases, allocated = {conv.targets[0].id}, {}
    j = i + 1
    while j < len(block):  # aliases (`buf1 = buf0; del buf0`), allocations and dels up to the next launch
        stmt = block[j]
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            if isinstance(stmt.value, ast.Name) and stmt.value.id in aliases:
                aliases.add(stmt.targets[0].id)
            elif isinstance(stmt.value, ast.Call) and re.fullmatch(r"_empty|torch\.empty\w*",
                                                                   ast.unparse(stmt.value.func)):
                allocated[stmt.targets[0].id] = stmt
            else:
                break
        elif not isinstance(stmt, ast.Delete):
            break
        j += 1
    if j == len(block) or not isinstance(block[j], ast.Expr) or _called(block[j]) is None:
        return f"{conv.targets[0].id}: no launch follows the convolution"
    consumer = block[j]
    launcher = _function(tree, _called(consumer))
    kernel = next((k for k in top_level_kernels(tree) if launcher is not None
                   and any(lf is launcher for lf, _, _ in grid_launches(tree, k))), None)
    if kernel is None or not kernel.name.startswith("triton_poi_"):
        return f"{conv.targets[0].id}: the next launch is not of an inductor pointwise kernel"
    params = [a.arg for a in launcher.args.args]
    grid_call = next(c for lf, _, c in grid_launches(tree, kernel) if lf is launcher)
    kernel_params = [a.arg for a in kernel.args.args]
    if [ast.unparse(a) for a in grid_call.args] != params or kernel_params[:len(params)] != params:
        return f"{kernel.name}: its launcher does not pass its parameters through in order"
    if kernel_params[len(params):] != ["XBLOCK"] or params[-1] != "xnumel":
        return f"{kernel.name}: parameters other than pointers, xnumel and XBLOCK"
    args = consumer.value.args
    if consumer.value.keywords or len(args) != len(params) or not all(isinstance(a, ast.Name) for a in args[:-1]):
        return f"{kernel.name}: its launch passes other than one name a tensor"
    if not (isinstance(args[-1], ast.Constant) and type(args[-1].value) is int):
        return f"{kernel.name}: its launch's xnumel is no literal"
    tensors = [a.id for a in args[:-1]]
    at_output = [p for p, t in zip(params, tensors) if t in aliases]
    if len(at_output) != 1:
        return f"{kernel.name}: it takes the convolution's output {len(at_output)} times"
    others = [p for p, t in zip(params, tensors) if t not in aliases]
    operands = [t for t in tensors if t not in aliases]
    if len(others) > _OPERANDS:
        return f"{kernel.name}: {len(others)} other tensors, more than the epilogue's {_OPERANDS}"
    if args[-1].value != numel:
        return f"{kernel.name}: it runs over {args[-1].value} elements, the convolution's output has {numel}"
    takes_columns = [a.arg for a in _function(tree, "_epilogue").args.args][-len(_COLUMNS):] == list(_COLUMNS)
    body = _epilogue_body(kernel, at_output[0], others, numel, channel_of(conv.value) if takes_columns else None)
    if isinstance(body, str):
        return body
    # every statement of _call after the launch (the return after an `if True:` block included)
    later = [s for s in ast.walk(call_fn) if isinstance(s, ast.stmt) and s.lineno > consumer.end_lineno
             and not isinstance(s, (ast.Delete, ast.If))]
    if at_output[0] not in _stored(kernel) and any(_names(s) & aliases for s in later):
        return f"{kernel.name}: it writes another buffer while the convolution's output is read afterwards"
    # operands allocated between the two move above the convolution
    moved = [allocated[t] for t in operands if t in allocated]
    dropped = [kernel, launcher]
    constants = {n for n in _names(launcher) if re.fullmatch(r"K\d+_[A-Z0-9_]+", n)}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and ast.unparse(stmt.targets) in constants:
            name = ast.unparse(stmt.targets)
            if sum(name in _names(s) for s in tree.body if s is not stmt and s is not launcher) == 0:
                dropped.append(stmt)
    signature = ["acc", "out_ptr", "offsets", "mask", *(f"ep{i}_ptr" for i in range(_OPERANDS)),
                 *(_COLUMNS if takes_columns else ())]
    header = (f"@triton.jit\ndef _epilogue({', '.join(signature)}):\n"
              f"    # inductor's {kernel.name}, fused by operator fuse_epilogue:\n"
              "    # the output tile in registers (acc) where it read the convolution's output, the tile's\n"
              "    # offsets and mask for xindex and xmask" + (", its columns for the channel\n" if takes_columns else "\n"))
    text = header + "".join(f"    {line}\n" for line in body)
    conv_constants = sorted(n for n in _names(_function(tree, _called(conv))) if re.fullmatch(r"K\d+_NUM_WARPS", n))
    prefix = conv_constants[0][:-len("NUM_WARPS")] if conv_constants else ""
    return _Fusion(conv, consumer, moved, operands, text, dropped, kernel.name, prefix)


_MATH_PER_THREAD = 32  # output floats a thread of the convolution's tile beyond which a math epilogue gets more warps


def _warps_for_math(child: str, f: _Fusion) -> str:
    """``child`` with the convolution's warps doubled until its tile holds at most 32 outputs a
    thread, where the fused epilogue calls libdevice (tanh, exp, log1p, erf: registers beside the
    tile's accumulators; on two H200s such children of 128 x 64 tiles ran 1.5-1.8x their parents'
    time in four warps, 1.16-1.33x in eight: section 18).  With the parameters loaded once a column
    (section 30, one H200) the rule still paid on two of three (l2_82, l2_87; l2_7 ran 1.08x faster
    without it), and at 128 x 128 tiles no warp count of 4, 8 or 16 won on all of l2_4, l2_46, l2_93."""
    if "libdevice." not in f.epilogue or not f.prefix:
        return child
    values = {t.name: t for t in find_tunables(child)}
    warps, block_m, block_n = (values.get(f.prefix + n) for n in ("NUM_WARPS", "BLOCK_M", "BLOCK_N"))
    if warps is None or block_m is None or block_n is None:
        return child
    count = warps.value
    while block_m.value * block_n.value > _MATH_PER_THREAD * 32 * count and count < 16:
        count *= 2
    return with_values(child, {warps: count}) if count != warps.value else child


def fused_source(source: str, f: _Fusion) -> str | None:
    """``source`` with fusion ``f`` made (see the module's text); None where the result does not parse."""
    lines = source.splitlines(keepends=True)
    tree = parse(source)
    library = _function(tree, "_epilogue")
    start = min([library.lineno] + [d.lineno for d in library.decorator_list])
    edits = [(start - 1, library.end_lineno, f.epilogue)]  # (first line, end line, text), 0-based
    for stmt in f.dropped:
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        edits.append((first - 1, stmt.end_lineno, ""))
    edits.append((f.consumer.lineno - 1, f.consumer.end_lineno, ""))
    for stmt in f.moved:
        edits.append((stmt.lineno - 1, stmt.end_lineno, ""))
    conv_line = lines[f.conv.end_lineno - 1]
    call = f.conv.value
    if f.conv.lineno != f.conv.end_lineno or call.end_col_offset != len(conv_line.rstrip("\r\n").rstrip()):
        return None  # the call must end its line (it does as the converter writes it)
    operands = "".join(f"{o}, " for o in f.operands)
    head = conv_line.rstrip()[:-1]
    indent = conv_line[:len(conv_line) - len(conv_line.lstrip())]
    moved = "".join(indent + ast.unparse(s) + "\n" for s in f.moved)
    edits.append((f.conv.lineno - 1, f.conv.end_lineno, f"{moved}{head}, epilogue=({operands.rstrip(' ')}))\n"))
    for first, end, text in sorted(edits, key=lambda e: e[0], reverse=True):
        lines[first:end] = [text] if text else []
    child = "".join(lines)
    try:
        parse(child)
    except SyntaxError:
        return None
    return _warps_for_math(child, f)


class FuseEpilogue(Operator):
    """Fold the pointwise kernel that reads a convolution's output into its epilogue (see the module's text)."""

    name = "fuse_epilogue"

    def _found(self, source: str) -> _Fusion | str:
        if "def _epilogue(" not in source or "triton_poi_" not in source:
            return _NONE
        try:
            tree = parse(source)
        except SyntaxError:
            return _NONE
        return _fusion(tree)

    def applies_to(self, parent) -> bool:
        return isinstance(self._found(parent.source), _Fusion)

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        found = self._found(context.parent.source)
        if isinstance(found, str):
            return Proposal(self.name, None, found)
        child = fused_source(context.parent.source, found)
        if child is None:
            return Proposal(self.name, None, f"{found.kernel}: the fused source did not parse")
        return Proposal(self.name, child, f"{found.kernel} fused into the convolution's epilogue "
                                          f"({len(found.operands)} operands)")
