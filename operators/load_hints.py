"""Offline change of one load's cache and eviction hints.

Needs no LLM.  ``tl.load`` takes two hints that change where data stays, never what is read:
``eviction_policy`` (``evict_first`` for data read once, so it does not push out what is read
again; ``evict_last`` for data read again, a row a second pass reads, a weight every program
reads) and ``cache_modifier`` (``.cg``: cached in L2 only, not in L1).  Inductor writes
``evict_last``/``evict_first`` from its own heuristics; which is best for a kernel at its shapes
is an empirical question, so the child takes one load of the parent and gives it another
combination of the two, a correct-by-construction move the evaluator then times.  A load whose
hint is an expression (not a literal) is left alone.

``.cg`` is never combined with an eviction policy: ptxas rejects the pair on sm_90 ("Modifier
'.evict_first' cannot be combined with modifier '.cg'"), which made 18 of 65 children in
kernelbench_search.md's section 13 fail to compile.
"""
from __future__ import annotations

import ast
import re

import numpy as np

from evo.core.kernel_source import call_spans
from operators.base import Context, Operator, Proposal

_LOAD = re.compile(r"\btl\.load\(")
EVICTION = ("", "evict_first", "evict_last")  # "": none (the hardware's default)
CACHE = ("", ".cg")
# the combinations a child may take: a policy or ".cg", not both (see the module's text)
COMBINATIONS = tuple((e, c) for e in EVICTION for c in CACHE if not (e and c))
_KEYS = ("eviction_policy", "cache_modifier")


def _hints(call: ast.Call) -> tuple[str, str] | None:
    """The load's (eviction policy, cache modifier), "" where absent; None if either is not a literal."""
    found = {k.arg: k.value for k in call.keywords if k.arg in _KEYS}
    values = []
    for key in _KEYS:
        value = found.get(key)
        if value is not None and not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            return None
        values.append(value.value if value is not None else "")
    return values[0], values[1]


def loads(source: str) -> list[tuple[int, int, ast.Call, tuple[str, str]]]:
    """Each ``tl.load(...)`` whose hints can be changed: its span, its call and its hints."""
    found = []
    for start, end in call_spans(source, _LOAD):
        try:
            call = ast.parse(source[start:end], mode="eval").body
        except SyntaxError:
            continue
        hints = _hints(call) if isinstance(call, ast.Call) else None
        if hints is not None:
            found.append((start, end, call, hints))
    return found


def with_hints(call: ast.Call, eviction: str, cache: str) -> str:
    """The call's text with these hints ("" drops one), other arguments as they were."""
    keywords = [k for k in call.keywords if k.arg not in _KEYS]
    keywords += [ast.keyword(arg=key, value=ast.Constant(value))
                 for key, value in zip(_KEYS, (eviction, cache)) if value]
    return ast.unparse(ast.Call(func=call.func, args=call.args, keywords=keywords))


class LoadHints(Operator):
    """Give one of the parent's loads other cache and eviction hints (see the module's text)."""

    name = "load_hints"

    def applies_to(self, parent) -> bool:
        return bool(loads(parent.source))

    def propose(self, context: Context, rng: np.random.Generator) -> Proposal:
        source = context.parent.source
        found = loads(source)
        if not found:
            return Proposal(self.name, None, "the parent has no tl.load with literal hints")
        index = int(rng.integers(len(found)))
        start, end, call, current = found[index]
        options = [hints for hints in COMBINATIONS if hints != current]
        eviction, cache = options[int(rng.integers(len(options)))]
        child = source[:start] + with_hints(call, eviction, cache) + source[end:]
        line = source.count("\n", 0, start) + 1
        said = lambda hints: "/".join(h or "-" for h in hints)  # noqa: E731
        return Proposal(self.name, child, f"load {index + 1} of {len(found)} (line {line}): "
                                          f"{said(current)} -> {said((eviction, cache))}")
