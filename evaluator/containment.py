"""Containment of candidate code: what it can see, write and leave behind.

A forked evaluation child calls :func:`enter` before it loads the candidate.
Where the OS allows unprivileged user namespaces, the child moves into new
user, PID and mount (and network) namespaces and forks their PID 1, which
forks the process that runs the candidate: it sees only its own namespace's processes (a
private ``/proc``), the whole filesystem is read-only except the writable
directories it is given (the worker's scratch and Triton's cache) and a
private ``/dev/shm``, and killing PID 1 kills every process in it.  Its
capabilities are dropped afterwards, so it cannot undo the read-only mounts.
Without user namespaces, Landlock (Linux 5.13+) makes the same directories the
only writable ones and keeps the engine's ``/proc/PID/environ`` unreadable.
The worker is a child subreaper besides (see ``evaluator.worker``), so no
process outlives its evaluation however it detached.

:func:`probe` runs the same steps in a throwaway process and says what this
machine allows, so ``evo run`` and ``evo eval`` can say what is off and why.
"""
from __future__ import annotations

import ctypes
import errno
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from typing import Literal

Mode = Literal["auto", "landlock", "off"]  # auto: namespaces, else Landlock; landlock: Landlock only; off: neither

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
_MOUNT_FLAGS = {"nosuid": _MS_NOSUID, "nodev": _MS_NODEV, "noexec": _MS_NOEXEC, "noatime": 0x400,
                "nodiratime": 0x800, "relatime": 0x200000}
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 1
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP = 1, 4, 24
_PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
# mount_setattr, capset, landlock_create_ruleset, landlock_add_rule, landlock_restrict_self
_SYSCALLS = {"x86_64": (442, 126, 444, 445, 446), "aarch64": (442, 91, 444, 445, 446)}
_LANDLOCK_WRITES_V1 = sum(1 << b for b in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12))  # write file, remove, make *
_LANDLOCK_REFER, _LANDLOCK_TRUNCATE, _LANDLOCK_WRITE_FILE = 1 << 13, 1 << 14, 1 << 1
_LANDLOCK_SCOPES = 1 | 2  # abstract unix sockets, signals

_libc = ctypes.CDLL(None, use_errno=True)


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _Failed(OSError):
    pass


def _check(result: int, what: str) -> int:
    if result < 0:
        raise _Failed(f"{what}: {os.strerror(ctypes.get_errno())}")
    return result


def _syscall(index: int, *args) -> int:
    numbers = _SYSCALLS.get(platform.machine())
    if numbers is None:
        raise _Failed(f"no system call table for {platform.machine()}")
    return _libc.syscall(numbers[index], *args)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
           f"mount {target}")


def _mount_setattr(path: str, read_only: bool) -> None:
    attr = _MountAttr(attr_set=_MOUNT_ATTR_RDONLY if read_only else 0,
                      attr_clr=0 if read_only else _MOUNT_ATTR_RDONLY)
    _check(_syscall(0, _AT_FDCWD, path.encode(), _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
           f"mount_setattr {path}")


def _mounts_below(root: str) -> list[tuple[str, set[str]]]:
    """Mount points at or below ``root`` with their per-mount options, from /proc/self/mountinfo."""
    below = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            target = fields[4].encode().decode("unicode_escape")  # spaces come as \040
            if target == root or target.startswith(root.rstrip("/") + "/"):
                below.append((target, set(fields[5].split(","))))
    return below


def _set_read_only(path: str, read_only: bool) -> None:
    """Make every mount at or below ``path`` read-only, or writable again."""
    try:
        _mount_setattr(path, read_only)
        return
    except _Failed:
        if ctypes.get_errno() != errno.ENOSYS:
            raise
    # Before Linux 5.12: one remount per mount, keeping the flags a user namespace may not change.
    for target, options in _mounts_below(path):
        kept = sum(bit for name, bit in _MOUNT_FLAGS.items() if name in options)
        _mount(None, target, None, _MS_BIND | _MS_REMOUNT | kept | (_MS_RDONLY if read_only else 0))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def drop_privileges() -> None:
    """No capabilities, none to regain through exec: ``/`` stays read-only and other processes closed."""
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    for cap in range(last + 1):  # needs CAP_SETPCAP; without it there is nothing to drop here
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    _libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    _check(_syscall(1, ctypes.byref(header), ctypes.byref(data)), "capset")


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (those a candidate detached are reparented to the worker, a
    child subreaper, so they are below it too)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def guard_engine() -> None:
    """Make the calling process (the engine, with its API keys) non-dumpable: its ``/proc/PID/environ``
    and memory are then closed to any process without CAP_SYS_PTRACE, whatever else is on."""
    if sys.platform == "linux":
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _enter_namespaces(network: bool) -> None:
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWPID | _CLONE_NEWNS | (_CLONE_NEWNET if network else 0)
    _check(_libc.unshare(flags), "unshare(user, pid, mount namespaces)")
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:  # there is no way back out of the namespace: no evaluation then, and why
        raise RuntimeError(f"a user namespace was made but its uid map refused ({exc}); "
                           "set evaluator.containment=landlock") from None


def _fork_and_wait() -> None:
    """Fork; the child returns, this process waits for it and exits as it did (never returns).

    Used twice: the keeper outside the new PID namespace forks its PID 1, which sets up the
    namespace and forks the process that runs the candidate.  PID 1 ignores the signals a candidate
    sends itself (``raise(SIGSEGV)``), hence the candidate is not PID 1; and PID 1 cannot die by a
    signal, so it passes one on as exit code 128 + signal, and the keeper dies by it again.
    """
    pid = os.fork()
    if pid == 0:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a killed keeper takes the namespace
        return
    status = os.waitpid(pid, 0)[1]
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    if os.getpid() != 1:
        sig = sig or (code - 128 if code > 128 else 0)
        if sig:
            if sig not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
    os._exit(128 + sig if sig else code)


def _read_only_filesystem(writable: list[str]) -> None:
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)  # nothing done here propagates to the machine
    for path in writable:
        _mount(path, path, None, _MS_BIND | _MS_REC)
    _set_read_only("/", True)
    for path in writable:
        _set_read_only(path, False)
    if os.path.isdir("/dev/shm"):  # a private one: nothing left for, or taken from, other processes
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1g,mode=1777")


def _landlock(writable: list[str]) -> int:
    abi = _syscall(2, None, 0, 1)  # LANDLOCK_CREATE_RULESET_VERSION
    _check(abi, "Landlock")
    handled = _LANDLOCK_WRITES_V1 | (_LANDLOCK_REFER if abi >= 2 else 0) | (_LANDLOCK_TRUNCATE if abi >= 3 else 0)
    # From ABI 6: no signals to, nor abstract unix sockets of, processes outside the domain.
    attr = (ctypes.c_uint64 * 3)(handled, 0, _LANDLOCK_SCOPES) if abi >= 6 else ctypes.c_uint64(handled)
    ruleset = _check(_syscall(2, ctypes.byref(attr), ctypes.sizeof(attr), 0), "landlock_create_ruleset")
    device_writes = _LANDLOCK_WRITE_FILE | (_LANDLOCK_TRUNCATE if abi >= 3 else 0)
    try:  # /dev: writing to existing devices (null, the GPU's nodes) only; /dev/shm and the rest: anything
        for path, access in [*((p, handled) for p in [*writable, "/dev/shm"]), ("/dev", device_writes)]:
            if not os.path.isdir(path):
                continue
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(allowed_access=access, parent_fd=fd)
                _check(_syscall(3, ruleset, 1, ctypes.byref(rule), 0), f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _check(_syscall(4, ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return abi


def enter(writable: list[str], *, network: bool = True, mode: Mode = "auto", namespaces_off: str = "",
          landlock_off: str = "") -> dict:
    """Contain the calling process (a single-threaded forked child); returns what is on, as
    :func:`describe` reads it.  With namespaces the caller continues in a new process, below the
    namespace's PID 1.  ``namespaces_off``, ``landlock_off``: why not to try namespaces, or Landlock
    (see :func:`settle`)."""
    writable = sorted({os.path.realpath(p) for p in writable if p and os.path.isdir(p)})
    state = {"mode": mode, "processes": "visible", "filesystem": "writable", "network": "shared", "why": {}}
    why = state["why"]
    if mode == "off":
        why.update(processes="evaluator.containment=off", filesystem="evaluator.containment=off")
    elif mode == "auto" and namespaces_off:
        why["namespaces"] = namespaces_off
    elif mode == "auto" and sys.platform == "linux":
        try:
            _enter_namespaces(network)
        except (_Failed, OSError) as exc:
            why["namespaces"] = str(exc)
        else:
            _fork_and_wait()  # from here on: PID 1 of the new namespace
            state["network"] = "private" if network else "shared"
            try:
                _read_only_filesystem(writable)
                state["filesystem"] = "read-only (mount namespace)"
            except _Failed as exc:
                why["filesystem"] = str(exc)
            try:
                _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
                state["processes"] = "hidden (PID namespace)"
            except _Failed as exc:  # e.g. a container's /proc with masked paths: listed, environ closed
                state["processes"] = "listed, environments closed (user namespace)"
                why["processes"] = str(exc)
    elif mode == "auto":
        why["namespaces"] = f"not Linux ({sys.platform})"
    if network and state["network"] == "shared" and sys.platform == "linux":
        if _libc.unshare(_CLONE_NEWNET) == 0:  # with CAP_SYS_ADMIN, but no user namespaces
            state["network"] = "private"
        else:
            why["network"] = f"unshare(network namespace): {os.strerror(ctypes.get_errno())}"
    if state["filesystem"] == "writable" and landlock_off:
        why["filesystem"] = landlock_off
    elif state["filesystem"] == "writable" and sys.platform == "linux" and mode != "off":
        try:
            abi = _landlock(writable)
            state["filesystem"] = "read-only (Landlock)"
            if state["processes"] == "visible":  # Landlock closes ptrace access out of its domain
                signals = ", signals blocked" if abi >= 6 else ""
                state["processes"] = f"listed, environments closed{signals} (Landlock)"
        except (_Failed, OSError) as exc:
            why["filesystem"] = str(exc)
    if mode != "off":
        try:
            drop_privileges()
        except (_Failed, OSError) as exc:
            why["capabilities"] = str(exc)
    if os.getpid() == 1:
        _fork_and_wait()  # the candidate's process, below the namespace's PID 1
    return state


def level(state: dict) -> str:
    """full: processes hidden and filesystem read-only; none: neither closed; partial otherwise."""
    closed_fs = state["filesystem"].startswith("read-only")
    if state["processes"].startswith("hidden") and closed_fs:
        return "full"
    return "partial" if closed_fs or state["processes"] != "visible" else "none"


def describe(state: dict) -> str:
    """One plain line: the level, what is on, and for what is off, why."""
    on = f"processes {state['processes']}, filesystem {state['filesystem']}, network {state['network']}"
    line = f"containment {level(state)}: {on}; every process a candidate starts is killed with its evaluation"
    if state.get("why") and level(state) != "full":
        line += "; off because: " + "; ".join(f"{k}: {v}" for k, v in state["why"].items())
    return line


def cuda_failure() -> str | None:
    """Why CUDA's driver does not start in this process (``cuInit``), or None where it does or where
    this machine has no CUDA driver.  Only for throwaway processes: it initialises the driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    code = libcuda.cuInit(0)
    return None if code == 0 else f"cuInit returned CUDA error {code}"


def _trial(writable: list[str], network: bool, mode: Mode, namespaces_off: str, landlock_off: str = "",
           cuda: bool = False) -> dict:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            state = enter(writable, network=network, mode=mode, namespaces_off=namespaces_off,
                          landlock_off=landlock_off)
            failure = cuda_failure() if cuda else None
            if failure:
                state["cuda_error"] = failure
        except BaseException as exc:  # noqa: BLE001 (reported: the caller tries without namespaces)
            state = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write_fd, json.dumps(state).encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reply:
        data = reply.read()
    os.waitpid(pid, 0)
    return json.loads(data or b'{"error": "the trial process died"}')


def settle(writable: list[str], *, network: bool = True, mode: Mode = "auto", cuda: bool = False) -> dict:
    """What :func:`enter` achieves here, tried in a throwaway child of the calling process.  Where
    entering namespaces fails outright (a user namespace whose uid map is refused, as some AppArmor
    policies do), it is tried again without them: then ``namespaces_off`` says why, for
    :func:`enter` in every later child.  With ``cuda``, the trial also starts CUDA's driver: where
    Landlock stops it (as root in a container, the driver wants to make device nodes Landlock
    refuses), Landlock is left out and ``landlock_off`` says why: a candidate must be able to run."""
    state = _trial(writable, network, mode, "", cuda=cuda)
    namespaces_off = ""
    if "error" in state:
        namespaces_off = state["error"]
        state = dict(_trial(writable, network, mode, namespaces_off, cuda=cuda), namespaces_off=namespaces_off)
    if "cuda_error" in state and state.get("filesystem") == "read-only (Landlock)":
        landlock_off = f"Landlock stops CUDA on this host ({state['cuda_error']}), so it is off"
        state = dict(_trial(writable, network, mode, namespaces_off, landlock_off, cuda=cuda),
                     landlock_off=landlock_off)
        if namespaces_off:
            state["namespaces_off"] = namespaces_off
    return dict(state, level=level(state)) if "error" not in state else state


def probe(*, network: bool = True, mode: Mode = "auto", cuda: bool = False, timeout_s: float = 30.0) -> dict:
    """:func:`settle` in a throwaway process: what candidates get on this machine."""
    try:
        code = f"from evaluator.containment import _probe_main; _probe_main({network!r}, {mode!r}, {cuda!r})"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        state = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        state = {"error": f"{type(exc).__name__}: {exc}"}
    if "error" in state:
        state = {"mode": mode, "processes": "visible", "filesystem": "writable", "network": "shared",
                 "why": {"probe": state["error"]}}
    return dict(state, level=level(state))


def _probe_main(network: bool, mode: str, cuda: bool = False) -> None:
    scratch = tempfile.mkdtemp(prefix="evo-probe-")
    try:
        print(json.dumps(settle([scratch], network=network, mode=mode, cuda=cuda)))
    finally:
        os.rmdir(scratch)
