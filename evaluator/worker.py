"""The sandbox worker: a long-lived process that forks one child per candidate.

Started by :class:`evaluator.sandbox.SandboxWorker` with a scrubbed
environment.  It imports torch and triton once (the slow part) and never
touches the GPU itself, so each forked child starts warm and initialises CUDA
on its own.  A child runs one request in a new session (process group), with
its output captured in a log file; the worker kills the whole group when the
request's timeout passes.  Protocol: one JSON object per line on stdin
(requests) and on the original stdout (replies).
"""
from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time
from pathlib import Path

FILE_SIZE_LIMIT = 1 << 30  # a runaway candidate cannot fill the disk
_PR_SET_PDEATHSIG = 1
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_PAGE = os.sysconf("SC_PAGE_SIZE")


def die_with_parent() -> None:
    """Ask Linux to kill this process when its parent dies (no orphans left running)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the timeouts still apply
        pass


def isolate_network() -> str:
    """Move this process into a new, empty network namespace (loopback down, no routes).

    Needs CAP_SYS_ADMIN, or unprivileged user namespaces (then this process
    maps itself to its own uid, so file access is unchanged).  Returns what
    was achieved; containers often allow neither.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWNET) == 0:
            return "isolated"
        uid, gid = os.getuid(), os.getgid()
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
            return f"not isolated: unshare failed ({os.strerror(ctypes.get_errno())})"
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
        return "isolated (user namespace)"
    except (OSError, AttributeError) as exc:
        return f"not isolated: {exc}"


def _rss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


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
    try:
        data = path.read_bytes()[-limit:]
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _child(request: dict, write_fd: int, log_path: Path, cpu_limit_s: int) -> None:
    os.setsid()
    die_with_parent()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
    # A backstop should the worker itself be stopped before it can enforce the timeout.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s))
    network = isolate_network() if request.get("isolate_network") else "not isolated: disabled"
    from evaluator import harness

    try:
        reply = harness.handle(request)
    except BaseException as exc:  # report, never let the child fall back into the server loop
        reply = {"harness_error": f"{type(exc).__name__}: {exc}"}
    if isinstance(reply.get("extra"), dict):
        reply["extra"]["network"] = network
    data = json.dumps(reply).encode()
    view = memoryview(data)
    while view:
        written = os.write(write_fd, view)
        view = view[written:]
    os.close(write_fd)  # the reply is complete: the worker may reap this process now


def run_isolated(request: dict, scratch: Path) -> dict:
    """Run one request in a forked child; kill its process group on timeout or excess memory."""
    timeout_s = float(request.get("timeout_s", 60))
    memory_limit = int(request.get("memory_limit_mb") or 0) << 20
    log_path = scratch / "child.log"
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            _child(request, write_fd, log_path, int(2 * timeout_s) + 60)
        except BaseException:
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks, deadline, timed_out, rss = [], time.monotonic() + timeout_s, False, 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_fd], [], [], min(remaining, 0.1))
        if ready:
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        elif memory_limit and (rss := _rss_bytes(pid)) > memory_limit:
            break
    os.close(read_fd)
    over_memory = rss > memory_limit > 0
    reply = None if timed_out or over_memory else _parse(chunks)
    if reply is not None or timed_out or over_memory:
        # With a reply in hand there is nothing left to wait for: the child is reaped at once.
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if reply is not None:
        return reply
    if over_memory:
        return {"sandbox": "memory", "reason": f"used {rss >> 20} MiB of host memory, over the limit of "
                f"{memory_limit >> 20} MiB; process group killed", "log": _tail(log_path)}
    if timed_out:
        return {"sandbox": "timeout", "reason": f"no result within {timeout_s:g} s; process group killed",
                "log": _tail(log_path)}
    how = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
           else f"exited with code {os.WEXITSTATUS(status)}")
    return {"sandbox": "crashed", "reason": f"the evaluation process {how} without a result",
            "log": _tail(log_path)}


def _parse(chunks: list[bytes]) -> dict | None:
    if not chunks:
        return None
    try:
        return json.loads(b"".join(chunks))
    except ValueError:  # cut short: the child died while writing
        return None


def main() -> None:
    die_with_parent()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stray prints must not corrupt the protocol stream
    scratch = Path(os.environ.get("EVO_SCRATCH", os.getcwd()))
    import torch  # noqa: F401  (preloaded for the forked children)
    import triton  # noqa: F401

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
        _send(protocol, run_isolated(request, scratch))


if __name__ == "__main__":
    main()
