"""Near-duplicate kernels: a child that only restates a program already made for its task.

A source's :class:`Fingerprint` is its token stream with what does not change the kernel taken
out: comments, docstrings and layout are dropped, the names the source binds (variables,
parameters, functions, imports) are masked, their pattern kept aside (each occurrence numbered
by its name's first use, so a copy with renamed variables has the same pattern), and so are
numeric literals, their values kept aside.

The rule, against each program of the task (an exact copy is caught before, by
``kernel_source.normalized_hash``):

1. the same masked tokens, the same pattern of names and the same numbers: the same kernel
   renamed or reformatted, a near-duplicate of similarity 1;
2. else, the same masked tokens and names as a program, other numbers: a *constants variant*
   (what the ``constants``, ``sweep`` and ``param_crossover`` operators make): a duplicate of no
   program;
3. the same masked tokens, other names: the similarity is the share of tokens whose names agree;
4. else it is difflib's ratio of the masked token streams (twice the tokens matched in order over
   both lengths, the common start and end matched first; names are not compared there: a line
   inserted would renumber every name after it), computed for the ``MAX_COMPARED`` structures
   that share the most tokens with the child and may reach the threshold.  At or above the
   threshold (3 and 4): a near-duplicate of the most similar program (unused lines added,
   statements reordered, a trivial edit).

Plain Python; the run loop's ``evo.loop.novelty`` keeps the fingerprints of each task's programs.
"""
from __future__ import annotations

import ast
import io
import keyword
import sys
import tokenize
from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from evo.core.kernel_source import parse

NUMBER, NAME = "#", "$"  # what a masked numeric literal and a masked bound name read as
# Rule 4 compares a child in full with this many structures at most, those sharing the most tokens
# with it: a lineage of hundreds of near-identical kernels costs milliseconds, not seconds.
MAX_COMPARED = 16
_DROPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}


@dataclass(frozen=True)
class NoveltySettings:
    """``novelty.*``: which children are compared with their task's programs before evaluation."""

    enabled: bool = True
    # Token similarity at or above which a child is a near-duplicate; with ``embedding_model``,
    # the cosine similarity of the two sources' embeddings instead.
    threshold: float = 0.98
    embedding_model: str | None = None  # a litellm embedding model; None: token similarity
    # Operators whose children are compared: the LLM's.  A repair is a small fix of a failed kernel
    # by design, and the offline operators' children differ by construction (constants, dot precision).
    operators: tuple[str, ...] = ("llm_rewrite", "llm_diff", "llm_crossover", "llm_seed")

    def __post_init__(self):
        if not 0 < self.threshold <= 1:
            raise ValueError("novelty.threshold must be in (0, 1]")
        object.__setattr__(self, "operators", tuple(self.operators))

    def applies_to(self, operator: str) -> bool:
        return self.enabled and operator in self.operators


@dataclass(frozen=True)
class Fingerprint:
    tokens: tuple[str, ...]  # masked: bound names as NAME, numbers as NUMBER
    names: tuple[int, ...]  # each masked name, numbered by its name's first use
    numbers: tuple[str, ...]  # the masked literals' values, in order
    counts: Counter = field(compare=False, repr=False)  # tokens -> occurrences: a cheap bound on the ratio


def _bound_names(tree: ast.Module) -> tuple[set[str], set[tuple[int, int]]]:
    """Names the source binds, and where keyword arguments' names stand (never renamed: they name
    the callee's parameters, ``mask=``, ``num_warps=``)."""
    bound, keywords = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.keyword) and node.arg:
            keywords.add((node.lineno, node.col_offset))
    return bound, keywords


def _logical_lines(source: str):
    """Significant tokens, grouped by logical line (each ending with its NEWLINE, if any)."""
    line = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in _DROPPED:
            continue
        line.append(tok)
        if tok.type == tokenize.NEWLINE:
            yield line
            line = []
    if line:
        yield line


def fingerprint(source: str, tree: ast.Module | None = None) -> Fingerprint | None:
    """The source's fingerprint; None if it does not parse (``tree``: its AST, if parsed already)."""
    try:
        tree = tree or parse(source)
        lines = list(_logical_lines(source))
    except (SyntaxError, tokenize.TokenError, IndentationError):
        return None
    bound, keywords = _bound_names(tree)
    first_use: dict[str, int] = {}
    tokens, names, numbers = [], [], []
    for line in lines:
        body = [t for t in line if t.type not in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE)]
        if body and all(t.type == tokenize.STRING for t in body):  # a docstring or bare string: no effect
            line = [t for t in line if t.type in (tokenize.INDENT, tokenize.DEDENT)]
        previous = None
        for tok in line:
            text = tok.string
            if tok.type == tokenize.NUMBER:
                numbers.append(text.lower().replace("_", ""))
                text = NUMBER
            elif tok.type == tokenize.NAME and text in bound and previous != "." and tok.start not in keywords \
                    and not keyword.iskeyword(text):
                names.append(first_use.setdefault(text, len(first_use)))
                text = NAME
            elif tok.type == tokenize.NEWLINE:
                text = "\n"
            elif tok.type in (tokenize.INDENT, tokenize.DEDENT):
                text = tokenize.tok_name[tok.type]
            tokens.append(sys.intern(text))
            previous = tok.string
    return Fingerprint(tuple(tokens), tuple(names), tuple(numbers), Counter(tokens))


def constants_variant(a: Fingerprint, b: Fingerprint) -> bool:
    """``a`` and ``b`` differ in their numbers only (rule 2)."""
    return a.tokens == b.tokens and a.names == b.names and a.numbers != b.numbers


def similarity(a: Fingerprint, b: Fingerprint) -> float:
    """How alike two fingerprints are, numbers aside (rules 1, 3 and 4 of the module's docstring)."""
    if a.tokens == b.tokens:
        differ = sum(x != y for x, y in zip(a.names, b.names))
        return 1.0 - differ / len(a.tokens) if a.tokens else 1.0
    return _ratio(a.tokens, b.tokens)


def _ratio(a: tuple[str, ...], b: tuple[str, ...]) -> float:
    """difflib's ratio, once the common start and end are matched: a kernel edited in one place
    costs a comparison of its edited middle only."""
    n = min(len(a), len(b))
    start = 0
    while start < n and a[start] == b[start]:
        start += 1
    end = 0
    while end < n - start and a[-1 - end] == b[-1 - end]:
        end += 1
    middle = SequenceMatcher(None, a[start:len(a) - end], b[start:len(b) - end], autojunk=False)
    matched = start + end + sum(block.size for block in middle.get_matching_blocks())
    return 2 * matched / (len(a) + len(b))


def _bound(a: Fingerprint, b: Fingerprint) -> float:
    """An upper bound of the ratio: the tokens the two share, whatever their order."""
    return 2 * sum((a.counts & b.counts).values()) / (len(a.tokens) + len(b.tokens))


@dataclass(frozen=True)
class Resemblance:
    """A child judged a near-duplicate: the program it resembles, and how closely."""

    program_id: int
    similarity: float
    measure: str = "tokens"  # or "embedding"

    def fields(self) -> dict:
        """For the event ``proposal_failed``."""
        return {"resembles": self.program_id, "similarity": round(self.similarity, 4), "measure": self.measure}

    @property
    def reason(self) -> str:
        return (f"near-duplicate of program {self.program_id} ({self.measure} similarity "
                f"{self.similarity:.3f}): not evaluated")


class FingerprintIndex:
    """The fingerprints of one task's programs, grouped by masked tokens: rules 1 to 3 are one
    lookup, and rule 4 compares the child once with each distinct structure, not each program
    (the constants variants of a kernel share one)."""

    def __init__(self):
        self._by_tokens: dict[tuple[str, ...], list[tuple[int, Fingerprint]]] = {}

    def __len__(self) -> int:
        return sum(len(group) for group in self._by_tokens.values())

    def add(self, program_id: int, fp: Fingerprint) -> None:
        self._by_tokens.setdefault(fp.tokens, []).append((program_id, fp))

    def twin(self, child: Fingerprint) -> Resemblance | None:
        """The program ``child`` is a renamed or reformatted copy of (rule 1), if any."""
        return next((Resemblance(pid, 1.0) for pid, fp in self._by_tokens.get(child.tokens, [])
                     if fp.names == child.names and fp.numbers == child.numbers), None)

    def variant_of(self, child: Fingerprint) -> bool:
        """``child`` is a constants variant of one of the programs (rule 2)."""
        return any(constants_variant(child, fp) for _, fp in self._by_tokens.get(child.tokens, []))

    def resembled(self, child: Fingerprint, threshold: float) -> Resemblance | None:
        """The program ``child`` near-duplicates, by the rule of the module's docstring; None when it
        is new enough, or a constants variant of one of the programs (and a copy of none)."""
        twin = self.twin(child)
        if twin is not None or self.variant_of(child):
            return twin
        same = self._by_tokens.get(child.tokens, [])
        best = None
        for pid, fp in same:
            ratio = similarity(child, fp)
            if ratio >= threshold and (best is None or ratio > best.similarity):
                best = Resemblance(pid, ratio)
        if best is not None:
            return best
        # Rule 4: the structures that may reach the threshold, those sharing the most tokens first;
        # one that cannot beat the best found so far ends the search.
        candidates = []
        for tokens, group in self._by_tokens.items():
            fp = group[0][1]
            if tokens != child.tokens and 2 * min(len(tokens), len(child.tokens)) >= threshold * (
                    len(tokens) + len(child.tokens)) and (bound := _bound(child, fp)) >= threshold:
                candidates.append((bound, group[0][0], fp))
        candidates.sort(key=lambda c: (-c[0], -c[1]))
        for bound, pid, fp in candidates[:MAX_COMPARED]:
            if best is not None and bound <= best.similarity:
                break
            ratio = _ratio(child.tokens, fp.tokens)
            if ratio >= threshold and (best is None or ratio > best.similarity):
                best = Resemblance(pid, ratio)
        return best
