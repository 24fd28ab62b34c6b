"""Getting a kernel's source out of an LLM's reply."""
from __future__ import annotations

import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(reply: str) -> str | None:
    """The candidate module in ``reply``: the last fenced block that defines
    ``ModelNew`` (else the longest Python block); None when there is none."""
    if not reply:
        return None
    blocks = [(lang.lower(), body.strip()) for lang, body in _FENCE.findall(reply)]
    python = [body for lang, body in blocks if lang in ("", "python", "py", "python3") and body]
    with_model = [body for body in python if "class ModelNew" in body]
    if with_model:
        return with_model[-1] + "\n"
    if python:
        return max(python, key=len) + "\n"
    if "class ModelNew" in reply and "```" not in reply:
        return reply.strip() + "\n"  # a bare module with no fences
    return None
