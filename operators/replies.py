"""Getting a child's source out of an LLM's reply, whatever the reply holds.

Two reply formats: a whole module in a fenced block (rewrite, crossover,
repair), or SEARCH/REPLACE blocks against the parent (diff).  Every function
here returns a value or a one-line reason; none raises on a bad reply.
"""
from __future__ import annotations

import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(```|\Z)", re.DOTALL)
_DIFF = re.compile(r"^<{5,9} ?SEARCH[ \t]*\n(.*?)^={5,9}[ \t]*\n(.*?)^>{5,9} ?REPLACE[ \t]*$", re.DOTALL | re.MULTILINE)
_PYTHON = ("", "python", "py", "python3")


def clean_text(text: str) -> str:
    """Valid UTF-8 text: lone surrogates and NULs (which the database rejects) become U+FFFD."""
    if not isinstance(text, str):
        text = str(text)
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\x00", "\ufffd")


def extract_code(reply: str) -> str | None:
    """The candidate module in ``reply``: the last complete fenced block that defines
    ``ModelNew`` (else the longest Python block); None when there is none."""
    if not reply:
        return None
    blocks = [(lang.lower(), body.strip(), bool(end)) for lang, body, end in _FENCE.findall(reply)]
    python = [(body, closed) for lang, body, closed in blocks if lang in _PYTHON and body]
    with_model = [body for body, _ in python if "class ModelNew" in body]
    if with_model:
        return with_model[-1] + "\n"
    if python:
        return max((body for body, _ in python), key=len) + "\n"
    if "class ModelNew" in reply and "```" not in reply:
        return reply.strip() + "\n"  # a bare module with no fences
    return None


def code_from_reply(reply: str) -> tuple[str | None, str]:
    """The module in a rewrite-style reply, or None and why not."""
    source = extract_code(reply)
    if source is None:
        return None, "the reply holds no Python code block"
    if "class ModelNew" not in source:
        return None, "the reply's code defines no ModelNew"
    if "\ufffd" in source:
        return None, "the reply's code holds bytes that are not UTF-8"
    return source, ""


def _replace_once(source: str, search: str, replace: str) -> str | None:
    """``source`` with ``search`` replaced; exact first, then ignoring trailing whitespace and indentation."""
    if search and source.count(search) == 1:
        return source.replace(search, replace, 1)
    lines, wanted = source.splitlines(keepends=True), search.splitlines()
    if not wanted:
        return None
    for strip in (str.rstrip, str.strip):
        key = [strip(line) for line in wanted]
        hits = [i for i in range(len(lines) - len(key) + 1)
                if [strip(line) for line in lines[i:i + len(key)]] == key]
        if len(hits) == 1:
            i = hits[0]
            tail = "" if replace.endswith("\n") or not replace else "\n"
            return "".join(lines[:i]) + replace + tail + "".join(lines[i + len(key):])
    return None


def apply_diff(source: str, reply: str) -> tuple[str | None, str]:
    """Apply every SEARCH/REPLACE block of ``reply`` to ``source``, or None and why not.

    A reply with no diff block but a whole module (models do that) is taken as a rewrite.
    """
    blocks = _DIFF.findall(reply or "")
    if not blocks:
        if "<<<<<<< SEARCH" in (reply or ""):
            return None, "a SEARCH/REPLACE block is not closed (truncated reply?)"
        code, why = code_from_reply(reply)
        return (code, "") if code else (None, "the reply holds no SEARCH/REPLACE block and no module")
    for number, (search, replace) in enumerate(blocks, 1):
        changed = _replace_once(source, search, replace)
        if changed is None:
            where = "matches nowhere" if source.count(search) == 0 else "matches several places"
            first = search.strip().splitlines()[0][:80] if search.strip() else ""
            return None, f"SEARCH block {number} of {len(blocks)} {where} in the parent ({first!r})"
        source = changed
    if "\ufffd" in source:
        return None, "the diff inserts bytes that are not UTF-8"
    return source, ""
