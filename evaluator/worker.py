"""The sandbox worker: a long-lived process that forks one child per candidate.

Started by :class:`evaluator.sandbox.SandboxWorker` with a scrubbed
environment.  It imports torch and triton once (the slow part) and never
touches the GPU itself, so each forked child starts warm and initialises CUDA
on its own.  A child runs one request in a new session, contained as
:mod:`evaluator.containment` allows (own PID, mount and network namespaces, a
read-only filesystem but its scratch, no capabilities), with its output
captured in a log file.  The worker is a child subreaper: once the child's
length-prefixed reply is in, or its timeout or memory limit is passed, every
process below the worker is killed, however it detached.  Protocol: one JSON
object per line on stdin (requests) and on the original stdout (replies).
"""
from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import stat
import struct
import sys
import tempfile
import time
from pathlib import Path

from evaluator import containment
from evaluator.gate_relay import GateRelay

FILE_SIZE_LIMIT = 1 << 30  # a runaway candidate cannot fill the disk
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
_PAGE = os.sysconf("SC_PAGE_SIZE")
_HEADER = struct.Struct(">Q")  # a reply's length: complete replies are read without waiting for EOF
_protocol_fd = -1  # the worker's reply stream, closed in every child: candidates must not hold it


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (no orphans left running)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the timeouts still apply
        pass


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def kill_descendants(rounds: int = 50) -> int:
    """SIGKILL and reap every process below the worker, again until none is left (one may fork
    while the others die); returns how many were killed."""
    killed = 0
    for _ in range(rounds):
        pids = containment.descendants(os.getpid())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not pids:
            break
        time.sleep(0.01)
    return killed


def _in_own_pid_namespace(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    except OSError:
        return False


def describe_environment() -> dict:
    """Versions that shape a measurement (the GPU's name is added by each evaluation).

    Read before the worker forks, without initialising CUDA here: the driver's version from
    ``nvidia-smi``, where there is one.
    """
    import platform
    import subprocess

    import torch
    import triton

    driver = ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        driver = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired):
        pass
    return {"driver": driver, "cuda": torch.version.cuda or "", "torch": torch.__version__,
            "triton": triton.__version__, "python": platform.python_version()}


def _send(stream, message: dict) -> None:
    stream.write(json.dumps(message) + "\n")
    stream.flush()


def _tail(path: Path, limit: int = 3000) -> str:
    """The end of a log the candidate could have replaced: only a regular file, never followed through
    a link, never waited on (a FIFO put in its place would block the worker)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ""
        os.lseek(fd, max(0, info.st_size - limit), os.SEEK_SET)
        data = os.read(fd, limit)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def _child(request: dict, write_fd: int, log_path: Path, cpu_limit_s: int) -> None:
    os.setsid()
    die_with_parent()
    if _protocol_fd >= 0:
        os.close(_protocol_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    # A backstop should the worker itself be stopped before it can enforce the timeout.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s))
    from evaluator import harness

    # With namespaces, what follows runs in a new process, in the candidate's own PID namespace.
    state = containment.enter(_writable(request), network=bool(request.get("isolate_network")),
                              mode=request.get("containment", "auto"), **request["containment_off"])
    try:
        reply = harness.handle(request)
    except BaseException as exc:  # report, never let the child fall back into the server loop
        from evaluator.calls import is_out_of_memory  # torch is loaded by now: the harness imported it

        reply = {"harness_error": f"{type(exc).__name__}: {exc}", "out_of_memory": is_out_of_memory(exc)}
    if isinstance(reply.get("extra"), dict):
        private = state["network"] == "private"
        reply["extra"]["network"] = "isolated" if private else f"not isolated: {state['why'].get('network')}"
        reply["extra"]["containment"] = dict(level=containment.level(state), **state)
    data = json.dumps(reply).encode()
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        written = os.write(write_fd, view)
        view = view[written:]
    os.close(write_fd)


def _writable(request: dict) -> list[str]:
    return [request["scratch"], os.environ.get("TRITON_CACHE_DIR"), os.environ.get("TMPDIR")]


_settled: dict[tuple, dict] = {}


def _settle_key(request: dict) -> tuple:
    return (bool(request.get("isolate_network")), request.get("containment", "auto"),
            str(request.get("device", "cpu")).startswith("cuda"))


def _containment_off(request: dict) -> dict:
    """Why children must not try namespaces, or Landlock, here (empty where they may), tried once per
    setting and device (with CUDA's driver started in the trial on a GPU)."""
    key = _settle_key(request)
    if key not in _settled:
        state = containment.settle(_writable(request), network=key[0], mode=key[1], cuda=key[2])
        _settled[key] = {"namespaces_off": state.get("namespaces_off") or state.get("error") or "",
                         "landlock_off": state.get("landlock_off") or ""}
    return _settled[key]


def _read_reply(read_fd: int, pid: int, timeout_s: float, memory_limit: int,
                gate: GateRelay | None = None) -> tuple[bytes, str, int]:
    """The child's length-prefixed reply, or why there is none: ``timeout``, ``memory`` or ``exited``
    (with the child's wait status).  A process the candidate left holding the pipe costs no wait.
    Time spent stopped by the GPU's timing gate, or waiting for it, does not count."""
    data, deadline, tree, refreshed = b"", time.monotonic() + timeout_s, [pid], 0.0
    watched = [read_fd] + ([gate.want_fd] if gate else [])
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack_from(data)[0]:
        tick = time.monotonic()
        remaining = deadline - tick
        if remaining <= 0:
            return data, "timeout", 0
        ready, _, _ = select.select(watched, [], [], min(remaining, 0.1))
        if (lost := time.monotonic() - tick - min(remaining, 0.1)) > 0.5:
            deadline += lost  # this process was stopped (SIGSTOP by the timing gate)
        if gate and gate.want_fd in ready:
            deadline += gate.relay()
            if not gate.open:
                watched = [read_fd]
            continue
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                return data, "exited", os.waitpid(pid, 0)[1]
            data += chunk
            continue
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:  # whatever it wrote before it ended is in the pipe already
            while select.select([read_fd], [], [], 0)[0] and (chunk := os.read(read_fd, 1 << 16)):
                data += chunk
            return data, "exited", status
        if memory_limit:
            if time.monotonic() - refreshed > 1.0:
                tree, refreshed = [pid, *containment.descendants(pid)], time.monotonic()
            # The keeper and the PID 1 of a namespace only wait: their pages are the candidate's
            # process's too, not to be counted three times.
            waiting = 2 if len(tree) > 1 and _in_own_pid_namespace(tree[1]) else 0
            if (used := sum(_rss_bytes(p) for p in tree[waiting:])) > memory_limit:
                return data, "memory", used
    return data, "", 0


def run_isolated(request: dict, scratch: Path, send=None) -> dict:
    """Run one request in a forked child; when it answers, times out or uses too much memory, kill
    every process it started (however they detached).  ``send`` passes gate messages to the host."""
    request["containment_off"] = _containment_off(request)
    # A folder of this evaluation's own, made here and removed after it: its task and candidate files
    # and its log, where no earlier candidate can have put anything (a FIFO, a link, a planted .pyc)
    try:
        own = _own_folder(scratch)
    except OSError as exc:
        return {"sandbox": "crashed", "reason": f"no folder could be made for the evaluation in the worker's "
                                               f"scratch: {exc}"}
    request["scratch"] = str(own)
    gate = GateRelay(send) if request.get("gate") and send is not None else None
    request["gate_fds"] = gate.child_fds() if gate else None
    timeout_s = float(request.get("timeout_s", 60))
    memory_limit = int(request.get("memory_limit_mb") or 0) << 20
    try:
        return _run_child(request, own, send, gate, timeout_s, memory_limit)
    finally:
        shutil.rmtree(own, ignore_errors=True)


def _own_folder(scratch: Path) -> Path:
    """A new folder in the scratch, made writable again first should an earlier candidate have
    taken that away (the worker owns the scratch, and would otherwise fail every evaluation after)."""
    try:
        return Path(tempfile.mkdtemp(prefix="evaluation-", dir=scratch))
    except PermissionError:
        os.chmod(scratch, 0o700)
        return Path(tempfile.mkdtemp(prefix="evaluation-", dir=scratch))


def _run_child(request: dict, own: Path, send, gate, timeout_s: float, memory_limit: int) -> dict:
    log_path = own / "child.log"
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            if gate:
                gate.close()
            _child(request, write_fd, log_path, int(2 * timeout_s) + 60)
        except BaseException:
            import traceback

            traceback.print_exc()  # into the child's log, whose tail the crash reply carries
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    if gate:
        gate.close_child_ends()
    data, failure, detail = _read_reply(read_fd, pid, timeout_s, memory_limit, gate)
    os.close(read_fd)
    if gate:
        gate.close()
    if failure != "exited":
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    kill_descendants()
    reply = _parse(data)
    if reply is not None:
        return reply
    killed = "process group killed, and every process it started"
    if failure == "memory":
        return {"sandbox": "memory", "reason": f"used {detail >> 20} MiB of host memory, over the limit of "
                f"{memory_limit >> 20} MiB; {killed}", "log": _tail(log_path)}
    if failure == "timeout":
        return {"sandbox": "timeout", "reason": f"no result within {timeout_s:g} s; {killed}",
                "log": _tail(log_path)}
    status = detail
    how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
           else f"exited with code {os.WEXITSTATUS(status)}")
    return {"sandbox": "crashed", "reason": f"the evaluation process {how} without a result",
            "log": _tail(log_path)}


def _parse(data: bytes) -> dict | None:
    if len(data) < _HEADER.size or len(data) - _HEADER.size < _HEADER.unpack_from(data)[0]:
        return None  # none, or cut short: the child died while writing
    try:
        reply = json.loads(data[_HEADER.size:])
    except (ValueError, RecursionError):  # garbage, or nested past the parser's depth: no result
        return None
    return reply if isinstance(reply, dict) else None


# What kernels derived from torch.compile (seeds, and their children) import besides torch and triton:
# inductor's helpers take 1.4 s to import on a 2-core host and 0.4-0.7 s on an H100's, which every
# forked child paid again in its load phase.  Imported here, before the fork, they cost nothing there.
KERNEL_HELPERS = ("torch._inductor.runtime.triton_helpers", "triton.language.extra.libdevice")


def preload_kernel_helpers() -> None:
    import importlib

    for name in KERNEL_HELPERS:
        try:
            importlib.import_module(name)
        except Exception:  # another torch or triton: the candidate's own import says what is missing
            pass


def main() -> None:
    global _protocol_fd
    die_with_parent()
    import ctypes

    # Orphans of a candidate are reparented here, not to init, so kill_descendants finds them.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _protocol_fd = os.dup(1)
    protocol = os.fdopen(_protocol_fd, "w", buffering=1)
    os.dup2(2, 1)  # stray prints must not corrupt the protocol stream
    scratch = Path(os.environ.get("EVO_SCRATCH", os.getcwd()))
    import torch  # noqa: F401  (preloaded for the forked children)
    import triton  # noqa: F401

    if os.environ.get("TRITON_INTERPRET") != "1":  # a GPU's worker (on the CPU, tests: not worth its start)
        preload_kernel_helpers()

    import evaluator.harness  # noqa: F401
    from evaluator.guards import warm_up

    warm_up()  # CPU only: the worker never initialises CUDA, its children do
    environment = describe_environment()

    _send(protocol, {"ready": True, "pid": os.getpid(), "torch": torch.__version__,
                     "triton": triton.__version__})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        request["scratch"] = str(scratch)
        request["environment"] = environment
        if request.get("kind") == "settle":  # the Evaluator's warm start: not in the first evaluation
            tried_now = _settle_key(request) not in _settled
            _send(protocol, {"ok": True, "containment_off": _containment_off(request), "tried_now": tried_now})
            continue
        _send(protocol, run_isolated(request, scratch, lambda message: _send(protocol, message)))


if __name__ == "__main__":
    main()
