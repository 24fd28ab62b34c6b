"""The layers of the engine, checked on every import (those inside functions too).

    evaluator                      imports no other package of the engine
    evo.core (the domain model)    imports only itself and evaluator
    archive, operators, islands    import of evo only evo.core
    evo.loop, evo.views            never import the application above them (cli, config, runner, resume, sweep)
and no module imports itself back through others (no import circle, package facades aside).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("evo", "archive", "islands", "operators", "evaluator")
SKIP = ("evo/suite", "evo/templates", "archive/migrations")
APPLICATION = {"evo.cli", "evo.config", "evo.runner", "evo.resume", "evo.sweep"}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            relative = path.relative_to(ROOT)
            if any(str(relative).startswith(skip) for skip in SKIP):
                continue
            name = ".".join(relative.with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the engine modules it imports (``from p import m`` counts as importing ``p.m``)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def _within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _breaches(rule) -> list[str]:
    return sorted(f"{m} imports {t}" for m, targets in import_graph().items() for t in targets if rule(m, t))


def test_the_evaluator_imports_no_other_package_of_the_engine():
    assert _breaches(lambda m, t: _within(m, "evaluator") and not _within(t, "evaluator")) == []


def test_the_domain_model_imports_only_itself_and_the_evaluator():
    assert _breaches(lambda m, t: _within(m, "evo.core") and not _within(t, "evo.core", "evaluator")) == []


def test_archive_operators_and_islands_import_only_the_domain_model_of_evo():
    assert _breaches(lambda m, t: _within(m, "archive", "operators", "islands") and _within(t, "evo")
                     and not _within(t, "evo.core") and t != "evo") == []


def test_the_loop_and_the_views_never_import_the_application_above_them():
    assert _breaches(lambda m, t: _within(m, "evo.loop", "evo.views", "evo.core") and t in APPLICATION) == []


def test_no_import_circle():
    """Strongly connected components of the graph without the packages' ``__init__`` facades."""
    graph = import_graph()
    facades = {m for m in graph if (ROOT / m.replace(".", "/") / "__init__.py").is_file()}
    graph = {m: {t for t in targets if t not in facades} for m, targets in graph.items() if m not in facades}
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's algorithm
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert circles == []


def test_a_breach_is_seen(tmp_path, monkeypatch):
    """The graph sees imports inside functions: the check cannot be dodged that way."""
    path = ROOT / "evo" / "core" / "errors.py"
    source = path.read_text(encoding="utf-8")
    assert not any("evo.runner" in t for t in import_graph()["evo.core.errors"])
    fake = tmp_path / "errors.py"
    fake.write_text(source + "\n\ndef _late():\n    from evo.runner import run_search\n")
    real_read = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real_read(fake if self == path else self, *a, **k))
    assert "evo.runner" in import_graph()["evo.core.errors"]
