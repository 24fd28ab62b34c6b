"""What a resumed run goes on with: the config and the problem sources it holds, and what is given now.

``evo run run.dir=DIR`` on a directory that holds a run resumes it.  Its config is the one the run
last ran with (``config.yaml``) with the keys given on this command line: those that differ are
listed, applied where a resumed run can honour them (budget, LLM settings and budgets, operators,
progress, evaluators, Ray) and recorded in ``events.jsonl``; those that would change what the run is
(its seed, its archive and cells, its islands) are refused.

The run also holds the source of every problem file it started with (``meta`` rows
``task_source.<name>``).  A problem file edited since is named, and the run goes on only if this
start says what to do: ``run.keep_stored_sources=true`` searches on with the stored sources; a new
``run.dir`` starts a new run from the edited files.  That choice is never saved with the run.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from archive.queries import open_reader

from evo.core.errors import ConfigError, RunDirError
from evo.core.hydra_nodes import current_targets
from evo.core.run_dir import RUN_FILE
from evo.core.task import Task

SOURCE_META = "task_source."  # + task name: {"path", "sha256", "source", "stored_at"}
# Keys that are this start's alone: never taken from, or compared with, the saved config.
NOT_SAVED = ("run.dir", "run.keep_stored_sources", "run.seeds_from")
# What makes a run the run it is: a resume that changes one of these is refused.
IDENTITY = {
    "run.seed": "the run's random streams and migration draws",
    "archive": "the archive's database, descriptors and cells",
    "islands.count": "the islands that hold the cells and the lineage",
}
_UNSET = object()


@dataclass(frozen=True)
class Override:
    """A key given to a resumed run whose value differs from the one it last ran with."""

    key: str
    saved: object  # _UNSET: the run's config had no such key (made by an older engine)
    given: object

    def line(self) -> str:
        saved = "(unset)" if self.saved is _UNSET else json.dumps(self.saved)
        return f"{self.key}: {saved} -> {json.dumps(self.given)}"

    def to_dict(self) -> dict:
        return {"key": self.key, "saved": None if self.saved is _UNSET else self.saved, "given": self.given}


def _leaves(node, prefix: str = "") -> dict[str, object]:
    """Dotted key -> value of a plain config tree.  Lists are values, and so are maps whose keys are
    not names (``llm.prices``: model -> prices), so that a model name with a dot stays one key."""
    if not isinstance(node, dict) or not node or not all(isinstance(k, str) and k.isidentifier() for k in node):
        return {prefix: node} if prefix else {}
    out: dict[str, object] = {}
    for key, value in node.items():
        out.update(_leaves(value, f"{prefix}.{key}" if prefix else key))
    return out


def _named(overrides: list[str]) -> set[str]:
    """The config paths that command-line overrides name (a group's node, or a key)."""
    named = set()
    for text in overrides:
        key = text.split("=", 1)[0].lstrip("+~")
        named.add(key.split("@", 1)[1] if "@" in key else key)
    return named


def _identity(key: str) -> str | None:
    for root, why in IDENTITY.items():
        if key == root or key.startswith(root + "."):
            return why
    return None


def saved_config(run_dir: Path) -> str | None:
    """The config the run in ``run_dir`` last ran with, or None where the directory holds no run."""
    if not (run_dir / RUN_FILE).is_file() or not (run_dir / "config.yaml").is_file():
        return None
    try:
        return current_targets((run_dir / "config.yaml").read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunDirError(f"run.dir {run_dir} has an unreadable config.yaml: {exc}") from None


def resumed_config(given: DictConfig, saved_yaml: str, overrides: list[str],
                   defaults: DictConfig) -> tuple[DictConfig, list[Override]]:
    """The config a resumed run goes on with, and the overrides that change it.

    ``given``: the config composed from this command line; ``overrides``: the command line's
    overrides as typed; ``defaults``: the config composed without them.  A key counts as given
    when an override names it (or a node above it, as ``task=quick`` does) or sets it away from its
    default (as ``experiment=...`` does); every other key keeps the run's saved value.
    """
    try:
        saved = _leaves(OmegaConf.to_container(OmegaConf.create(saved_yaml), resolve=True))
    except Exception as exc:  # noqa: BLE001 (a damaged config.yaml: say so, not a traceback)
        raise RunDirError(f"the run's config.yaml cannot be read: {exc}") from None
    now = _leaves(OmegaConf.to_container(given, resolve=True))
    default = _leaves(OmegaConf.to_container(defaults, resolve=True))
    named = _named(overrides)
    explicit = {k for k in now if now[k] != default.get(k, _UNSET)
                or any(k == n or k.startswith(n + ".") for n in named)}
    effective = OmegaConf.create(OmegaConf.to_container(given, resolve=True))
    changes = []
    for key in sorted(now):
        if any(key == n or key.startswith(n + ".") for n in NOT_SAVED):
            continue
        if key not in explicit:
            if key in saved:
                OmegaConf.update(effective, key, saved[key], merge=False)
        elif saved.get(key, _UNSET) != now[key]:
            changes.append(Override(key, saved.get(key, _UNSET), now[key]))
    refused = [c for c in changes if _identity(c.key) and c.saved is not _UNSET]
    if refused:
        lines = "\n".join(f"  {c.line()} ({_identity(c.key)})" for c in refused)
        raise ConfigError("a resumed run keeps what makes it the run it is; these overrides would change it:\n"
                          f"{lines}\nleave them out to resume, or choose a new run.dir to start a new run")
    return effective, changes


# -- the problem sources a run holds -------------------------------------------------------------
def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Held:
    """What a run's archive holds of its tasks, read before a resume does any work."""

    sources: dict[str, dict]  # task name -> the record of its problem file (SOURCE_META)
    searched: set[str]  # tasks with programs: checked against their stored source


def held_by_run(archive_url: str, names: list[str]) -> Held | None:
    """The stored problem sources of ``names`` and which of them have programs; None where the run
    has no archive yet."""
    reader = open_reader(archive_url)
    if reader is None:
        return None
    try:
        records = {}
        for name in names:
            value = reader.meta(SOURCE_META + name)
            if value is not None:
                records[name] = json.loads(value)
        return Held(records, {t for t, row in reader.task_counts().items() if row.get("programs")})
    finally:
        reader.close()


def tasks_to_resume(tasks: list[Task], held: Held | None, *,
                    keep_stored: bool) -> tuple[list[Task], list[str]]:
    """The tasks a resumed run searches, and lines saying what it found.

    A problem file whose source differs from the one the run stored, for a task the run has programs
    of, stops the resume, naming every such file, unless ``keep_stored``: then the stored source is
    searched on (the file is left as it is).  A task without programs (set aside, say) takes the
    edited file: nothing in the run was checked against the old one.  Seed kernels are not compared.
    """
    if held is None:
        return tasks, []
    stored = held.sources
    edited = [t for t in tasks if t.name in stored and stored[t.name]["sha256"] != _sha(t.source)]
    changed = [t for t in edited if t.name in held.searched]
    notes = [f"task {t.name}: {t.path} changed since the run stored it; the run has no programs of it yet, "
             "so the edited source is used" for t in edited if t not in changed]
    if changed and not keep_stored:
        lines = "\n".join(f"  task {t.name}: {t.path} (stored from {stored[t.name]['path']}, "
                          f"sha256 {stored[t.name]['sha256'][:12]}, now {_sha(t.source)[:12]})" for t in changed)
        raise RunDirError(
            f"the problem files of {len(changed)} task(s) changed since this run stored them:\n{lines}\n"
            "its programs were checked against the stored sources, so it does not go on with the edited ones. "
            "Either search on with the stored sources (the edited files are left aside): "
            "run.keep_stored_sources=true; "
            "or start a new run from the edited files: choose a new run.dir")
    out = []
    for task in tasks:
        if task in changed:
            out.append(replace(task, source=stored[task.name]["source"]))
            notes.append(f"task {task.name}: {task.path} changed since the run stored it; searching on with "
                         "the stored source (run.keep_stored_sources=true)")
        else:
            out.append(task)
    missing = [t.name for t in tasks if t.name not in stored]
    if missing:
        notes.append(f"this run had stored no problem source of {', '.join(missing)} (an older engine made "
                     "it, or it stopped before): the files given now are stored")
    return out, notes


def store_sources(archive, tasks: list[Task]) -> None:
    """Store each task's problem source in the run: where it has none yet (a new run: every task), or
    where the run has no programs of the task (its edited file is taken, see :func:`tasks_to_resume`)."""
    for task in tasks:
        value = archive.get_meta(SOURCE_META + task.name)
        if value is not None and (json.loads(value)["sha256"] == _sha(task.source) or archive.has_programs(task.name)):
            continue
        archive.set_meta(SOURCE_META + task.name, json.dumps(
            {"path": task.path, "sha256": _sha(task.source), "source": task.source, "stored_at": time.time()}))
