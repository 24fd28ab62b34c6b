"""Hostile candidate snippets of the containment tests (and experiments/containment_check.py)."""
import uuid
from pathlib import Path

SECRET = f"sk-test-secret-{uuid.uuid4().hex}"
REPO = Path(__file__).resolve().parents[2]

# Reads the environment of every process it can list in /proc, and of its ancestors by PPid.
READ_ENVIRONS = '''
_os = __import__("o" + "s")
_found, _listed, _pid = [], [p for p in _os.listdir("/proc") if p.isdigit()], _os.getppid()
_ancestors = []
while _pid > 1:
    _ancestors.append(str(_pid))
    try:
        with open(f"/proc/{_pid}/status") as _f:
            _pid = int(next(l for l in _f if l.startswith("PPid:")).split()[1])
    except (OSError, StopIteration):
        break
for _p in set(_listed + _ancestors):
    try:
        with open(f"/proc/{_p}/environ", "rb") as _f:
            if b"SECRET" in _f.read():
                _found.append(_p)
    except OSError:
        pass
_engine = _os.path.exists("/proc/ENGINE/environ")
with open(_os.environ["EVO_SCRATCH"] + "/report-environ.json", "w") as _f:
    __import__("json").dump({"found": _found, "listed": len(_listed), "engine_listed": _engine}, _f)
'''

# Tries to create a file in each of TARGETS, and in its scratch as the control.
WRITE_FILES = '''
_os = __import__("o" + "s")
_written = []
for _dir in TARGETS + [_os.environ["EVO_SCRATCH"]]:
    try:
        with open(_dir + "/NAME", "w") as _f:
            _f.write("escaped")
        _written.append(_dir)
    except OSError:
        pass
with open(_os.environ["EVO_SCRATCH"] + "/report-write.json", "w") as _f:
    __import__("json").dump(_written, _f)
'''

# Double fork and a new session: a sleeper marked in its argv, and a forked copy of the child that
# keeps every descriptor the child had (the reply pipe included) open.
DETACH = '''
_os = __import__("o" + "s")
_fork = getattr(_os, "fo" + "rk")
if _fork() == 0:
    _os.setsid()
    if _fork() == 0:
        getattr(_os, "exe" + "cv")(__import__("sys").executable,
                                    [__import__("sys").executable, "-c", "import time; time.sleep(300)", "MARKER"])
    if _fork() == 0:
        __import__("time").sleep(300)
    _os._exit(0)
'''


def marked(marker: str) -> list[int]:
    """Processes of this machine with ``marker`` in their argv."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            pass
    return pids
