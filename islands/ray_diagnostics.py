"""What to tell the user about a Ray cluster: why a run cannot join one, and which actors wait for what.

Plain functions of what :mod:`islands.ray_backend` (the only module that imports Ray) reads from
Ray: exceptions, the actor table, the nodes' resources.  Every message is one line, or a few that
name the actor, what it asks for, and what each node has free.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
import tempfile
from dataclasses import dataclass

from evo.core.errors import EvoError

TOKEN_DOCS = "docs/clusters.md"


class ClusterError(EvoError):
    """A Ray cluster cannot be joined, or it cannot place the run's actors."""


def _chain_text(exc: BaseException) -> str:
    texts, seen = [], exc
    while seen is not None and len(texts) < 8:
        texts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(texts)


def probe(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at ``host:port`` (None: something listens there, or it is not host:port).

    Ray itself retries an address where nothing listens for minutes, in silence."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return None
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"nothing answers at {address} ({exc.strerror or type(exc).__name__})"


class _Held:
    def __init__(self, file):
        self.file = file

    def replay(self) -> None:
        """Write what was held to stderr (a join that worked: nothing is lost)."""
        self.file.seek(0)
        text = self.file.read()
        self.file.close()
        if text:
            sys.stderr.write(text.decode(errors="replace"))
            sys.stderr.flush()


@contextlib.contextmanager
def held_stderr():
    """Hold what this process (Ray's C++ code included) writes to stderr; a join that fails is said in
    one line instead of a warning a second, a join that works replays it."""
    sys.stderr.flush()
    saved, held = os.dup(2), tempfile.TemporaryFile()
    os.dup2(held.fileno(), 2)
    try:
        yield _Held(held)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def join_failure(address: str, exc: BaseException, auth_mode: str | None) -> str:
    """One line: why this process could not join the Ray cluster at ``address``, and what to do."""
    text = _chain_text(exc)
    head = f"cannot join the Ray cluster at {address}: "
    if "InvalidAuthToken" in text or "AuthenticationError" in text or "Unauthenticated" in text:
        if (auth_mode or "").lower() != "token":
            why = (f"the cluster asks for a token and this process has token authentication off "
                   f"(RAY_AUTH_MODE={auth_mode or 'unset'})")
        else:
            why = "the cluster refused this process's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
        return head + why + f": set RAY_AUTH_MODE=token and the cluster's token here ({TOKEN_DOCS})"
    mismatch = re.search(r"Version mismatch: The cluster was started with:\s*Ray: (\S+)\s*Python: (\S+)\s*"
                         r"This process on .*? was started with:\s*Ray: (\S+)\s*Python: (\S+)", text, re.S)
    if mismatch:
        ray_c, py_c, ray_h, py_h = mismatch.groups()
        return (head + f"version mismatch: the cluster runs Ray {ray_c} on Python {py_c}, this process Ray "
                f"{ray_h} on Python {py_h}; every node and the driver need the same Ray and Python")
    if "Version mismatch" in text:
        return head + "version mismatch: " + " ".join(text.split("Version mismatch:", 1)[1].split())[:300]
    if "Could not find any running Ray instance" in text:
        return (f"cannot join a Ray cluster (ray.address={address}): none is running on this machine and "
                "RAY_ADDRESS is unset; give its head's host:port")
    last = text.strip().splitlines()[-1] if text.strip() else type(exc).__name__
    return head + last[:300]


@dataclass(frozen=True)
class Waiting:
    """An actor that has not started: its name in the run and the resources it asks for."""

    name: str
    asks: dict[str, float]
    placed: bool  # a worker process was given to it (it is starting), or it waits for resources


def _amount(name: str, value: float) -> str:
    if name in ("memory", "object_store_memory"):
        return f"{value / 2**30:.1f} GiB"
    return f"{value:g}"


def _resources(asks: dict[str, float]) -> str:
    return ", ".join(f"{k} {_amount(k, v)}" for k, v in sorted(asks.items())) or "nothing"


def _fits(asks: dict[str, float], free: dict[str, float]) -> bool:
    return all(free.get(k, 0.0) + 1e-9 >= v for k, v in asks.items())


def waiting_report(waiting: list[Waiting], nodes: dict[str, dict[str, dict[str, float]]], seconds: float) -> str:
    """Which actors wait, for what, and what each node has: ``nodes`` maps a node id to its
    ``{"total": {...}, "free": {...}}`` resources."""
    asked = sorted({k for w in waiting for k in w.asks} | {"CPU", "GPU"})
    lines = [f"Ray: after {seconds:.0f} s, {len(waiting)} actor(s) of this run have not started:"]
    for w in waiting:
        if w.placed:
            lines.append(f"  {w.name}: placed, starting (its process is importing and setting up)")
            continue
        if not any(_fits(w.asks, n["total"]) for n in nodes.values()):
            where = "no node of the cluster has that much in total"
        elif not any(_fits(w.asks, n["free"]) for n in nodes.values()):
            where = "no node has that much free now"
        else:
            where = "a node has it free: Ray has not placed it yet"
        lines.append(f"  {w.name} waits for {_resources(w.asks)}: {where}")
    for node_id, n in sorted(nodes.items()):
        have = ", ".join(f"{k} {_amount(k, n['free'].get(k, 0.0))}/{_amount(k, n['total'].get(k, 0.0))}"
                         for k in asked if k in n["total"] or k in ("CPU", "GPU"))
        lines.append(f"  node {node_id[:12]}: free/total {have}")
    return "\n".join(lines)


def gave_up(waiting: list[Waiting], nodes: dict, seconds: float) -> str:
    unplaced = [w for w in waiting if not w.placed]
    names = ", ".join(w.name for w in (unplaced or waiting))
    fix = ("fewer evaluator.workers or islands.count, or nodes with the resources they ask for" if unplaced
           else "see the actors' logs (ray logs) for why they do not start")
    return (f"Ray could not start {names} in {seconds:.0f} s (ray.placement_timeout_s): {fix}\n"
            + waiting_report(waiting, nodes, seconds))


def private_ray_note(existing: str) -> str:
    return (f"Ray: this run starts its own local Ray; the Ray cluster at {existing} (running on this machine or "
            "named by RAY_ADDRESS) is left alone: ray.address=auto joins it")
