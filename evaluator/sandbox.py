"""Host side of the sandbox: starts, feeds, watches and replaces a worker process.

The worker runs ``python -m evaluator.worker`` in a new session with an
environment built from an allow-list, so API keys and tokens in the engine's
environment never reach candidate code.  If the worker stops answering, its
whole process group is killed and a fresh one is started on the next request.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from evaluator.containment import descendants, guard_engine

# Variables a worker needs to find Python packages, the GPU and compilers.
_ALLOWED_ENV = (
    "PATH", "LANG", "LC_ALL", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH",
    "TRITON_PTXAS_PATH", "TRITON_LIBDEVICE_PATH", "TRITON_CUDACRT_PATH", "TRITON_CUDART_PATH",
    "VIRTUAL_ENV", "SYSTEMROOT", "CUDA_VISIBLE_DEVICES",
)

# Requests through the timing gate, if any: those that time on the GPU, and those that may run while
# another times (a task's preparation during a search; the containment trial, ``settle``, a start's
# host work): their start and compiles spared, their GPU work stopped.
GATED = ("evaluate", "compile_baseline", "roofline_peaks", "check_task", "compile_seed", "settle")


def worker_environment(device: str, cuda_index: int | None, scratch: Path, cache_dir: Path) -> dict:
    env = {k: os.environ[k] for k in _ALLOWED_ENV if k in os.environ}
    env.update(
        HOME=str(scratch), TMPDIR=str(scratch), EVO_SCRATCH=str(scratch),
        TRITON_CACHE_DIR=str(cache_dir), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
        # inductor's caches live under TMPDIR (the worker's scratch): warm after a task's first compile
        TORCHINDUCTOR_COMPILE_THREADS="1",
    )
    if device == "cpu":
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    elif cuda_index is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible_gpu(cuda_index)
    return env


def visible_gpu(cuda_index: int) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` entry of this process's GPU ``cuda_index``: the index counts the GPUs
    this process sees, so where its own ``CUDA_VISIBLE_DEVICES`` picks some (a scheduler's allocation,
    say ``2,3``), GPU 0 is the first of them, never the machine's GPU 0 (another job's, perhaps)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(cuda_index)
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    if not 0 <= cuda_index < len(ids):
        raise ValueError(f"GPU {cuda_index} is not among the {len(ids)} this process sees "
                         f"(CUDA_VISIBLE_DEVICES={visible!r})")
    return ids[cuda_index]


# The worker starts isolated (-I: no current folder, user site or PYTHON* variables on its import
# path; its scratch, the candidates' to write, is its current folder and HOME), unbuffered and
# writing no bytecode, then imports from this process's own path: a package or a .pth a candidate
# planted in the scratch is never imported when the worker starts again.
_BOOTSTRAP = ("import json, sys; sys.path[:0] = [p for p in json.loads(sys.argv[1]) if p not in sys.path]; "
              "from evaluator.worker import main; main()")


def worker_command() -> list[str]:
    engine = str(Path(__file__).resolve().parent.parent)  # the folder holding this package
    path = [engine] + [str(Path(p).resolve()) for p in sys.path if p and Path(p).resolve() != Path(engine)]
    return [sys.executable, "-I", "-u", "-B", "-c", _BOOTSTRAP, json.dumps(path)]


# Workers ask Linux to die with the thread that started them (PR_SET_PDEATHSIG follows the thread,
# not the process): one long-lived thread starts them all, whichever thread asks.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evo-spawn")


class WorkerDied(RuntimeError):
    pass


class SandboxWorker:
    """One worker process, restarted whenever it dies or hangs."""

    def __init__(self, *, device: str, cuda_index: int | None = None, scratch_root: str | None = None,
                 cache_dir: str | None = None, startup_timeout_s: float = 180.0, grace_s: float = 30.0):
        self.device = device
        self.cuda_index = cuda_index
        # The scratch is the candidates' to write; the worker's log sits beside it, out of their reach
        # (a link or a FIFO put there would have this process write elsewhere, or block on opening it)
        self.home = Path(tempfile.mkdtemp(prefix="evo-worker-", dir=scratch_root))
        self.scratch = self.home / "scratch"
        self.scratch.mkdir()
        self.cache_dir = Path(cache_dir) if cache_dir else self.scratch / "triton-cache"
        self.startup_timeout_s = startup_timeout_s
        self.grace_s = grace_s
        self.restarts = -1
        self._proc: subprocess.Popen | None = None
        self._buffer = b""
        self.info: dict = {}
        self.gate = None  # evaluator.gate.TimingGate shared with the other workers of the GPU, if any
        self.paused_s = 0.0  # time this worker's processes were stopped by the gate: not held against it
        # One thing at a time on this worker, a start or a request: a request waits for the warm start's
        # start (Evaluator warm start) and for another request (the warm start's roofline peaks beside
        # `evo eval`'s check of its task, say), whose reply shares its pipe.
        self._busy = threading.Lock()

    def ensure_started(self) -> None:
        """Start the worker unless it runs (a start or a request under way elsewhere is waited for)."""
        with self._busy:
            self._start_if_down()

    def _start_if_down(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            self.start()

    def start(self) -> None:
        self.close()
        guard_engine()  # this process may hold API keys: its environ closed to candidates in any case
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        env = worker_environment(self.device, self.cuda_index, self.scratch, self.cache_dir)
        self._log = open(self.home / "worker.log", "ab")
        self._proc = _SPAWNER.submit(
            subprocess.Popen, worker_command(), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, env=env, cwd=self.scratch, start_new_session=True,
        ).result()
        self._buffer = b""
        self.restarts += 1
        self.info = self._read_reply(time.monotonic() + self.startup_timeout_s)

    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def request(self, message: dict, timeout_s: float) -> dict:
        """Send one request; a dead or hung worker yields a ``sandbox`` failure reply.  With a gate,
        an evaluation may ask for the GPU alone (``{"gate": "want"}`` ... ``{"gate": "done"}``)."""
        with self._busy:  # one at a time: two requests' replies on one pipe would be mixed up
            return self._request(message, timeout_s)

    def _request(self, message: dict, timeout_s: float) -> dict:
        gated = self.gate is not None and message["kind"] in GATED
        if gated:  # host work until the child's first GPU work (evaluator.gate.host_start_over)
            self.gate.compiling(self)
        self._start_if_down()
        message = dict(message, timeout_s=timeout_s, gate=gated)
        try:
            self._proc.stdin.write((json.dumps(message) + "\n").encode())
            self._proc.stdin.flush()
            return self._read_reply(time.monotonic() + timeout_s + self.grace_s)
        except (WorkerDied, OSError) as exc:
            log = self._log_tail()
            self.close()
            return {"sandbox": "crashed", "reason": f"evaluation worker failed: {exc}", "log": log}
        finally:
            if self.gate is not None:
                self.gate.release(self)  # a no-op unless the evaluation ended holding it
                self.gate.compiled(self)  # nor unless it ended inside a compile

    def _gate_message(self, message: dict) -> bool:
        """Act on a gate message from the worker; False for any other message (a reply)."""
        if set(message) != {"gate"} or self.gate is None:
            return False
        if message["gate"] == "want":
            if not self.gate.holds(self):
                waited = time.monotonic()
                self.gate.acquire(self)
                self.paused_s += time.monotonic() - waited  # waiting for the gate is not the candidate's time
            self._proc.stdin.write(b'{"gate": "go"}\n')
            self._proc.stdin.flush()
        elif message["gate"] == "done":
            self.gate.release(self)
        elif message["gate"] == "compiling":
            self.gate.compiling(self)
        elif message["gate"] == "compiled":
            self.gate.compiled(self)  # stopped first if another evaluation is timing, then the go-ahead
            self._proc.stdin.write(b'{"gate": "go"}\n')
            self._proc.stdin.flush()
        return True

    def _read_reply(self, deadline: float) -> dict:
        proc, paused = self._proc, self.paused_s
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                while b"\n" not in self._buffer:
                    remaining = deadline + self.paused_s - paused - time.monotonic()
                    if remaining <= 0:
                        raise WorkerDied("no answer before the deadline")
                    if not sel.select(min(remaining, 1.0)):
                        if proc.stdout.closed:  # closed by another thread (close()): epoll forgot the pipe
                            raise WorkerDied("the worker was closed")
                        continue
                    try:
                        chunk = os.read(proc.stdout.fileno(), 1 << 16)
                    except ValueError:  # closed by another thread between the select and the read
                        raise WorkerDied("the worker was closed") from None
                    if not chunk:
                        raise WorkerDied(f"worker exited (code {proc.wait()})")
                    self._buffer += chunk
                line, self._buffer = self._buffer.split(b"\n", 1)
                message = json.loads(line)
                if not self._gate_message(message):
                    return message

    def _log_tail(self, limit: int = 2000) -> str:
        try:
            return (self.home / "worker.log").read_bytes()[-limit:].decode("utf-8", "replace")
        except OSError:
            return ""

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        # The worker's own group, and what its children detached into other sessions: stopped
        # mid-evaluation, the worker can no longer kill those itself.
        below = descendants(proc.pid) if proc.poll() is None else []
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._log.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
