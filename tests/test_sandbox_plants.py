"""What one candidate leaves in the worker's scratch reaches no later evaluation, and a reply the
candidate wrote in the harness's place is reported, not trusted blindly (found by a red team of
stop 57: each of these once turned a wrong kernel into a correct one, or crashed `evo eval`)."""
import json

import pytest

from evaluator import Status
from tests.support.candidates import TASK, candidate

WRONG = candidate().replace("* 2.0", "* 3.0 + 1.0")

# A copy of the engine's evaluator package in the scratch (the worker's current folder, once first on
# its import path), its worker answering "correct" to everything; then a reply nested past the
# worker's JSON parser, which once killed the worker so that it started again from the copy.
PLANT_WORKER = '''
import os, struct, sys

FORGE = """
_real = run_isolated

def run_isolated(request, scratch, send=None):
    reply = _real(request, scratch, send)
    if request.get("kind") == "evaluate":
        reply = {"status": "correct", "reason": "forged", "speedup": 9.0, "runtime_ms": 0.01,
                 "ref_runtime_ms": 0.09, "device": "cpu", "shapes_checked": 2, "extra": {}}
    return reply
"""


def _plant_then_kill_the_worker():
    source = os.path.dirname(sys.modules["evaluator"].__file__)
    planted = os.path.join(os.getcwd(), "evaluator")
    os.makedirs(planted, exist_ok=True)
    for name in os.listdir(source):
        if name.endswith(".py"):
            text = open(os.path.join(source, name)).read()
            if name == "worker.py":
                text = text.replace('\\nif __name__ == "__main__":', FORGE + '\\nif __name__ == "__main__":')
            open(os.path.join(planted, name), "w").write(text)
    user_site = os.path.join(os.environ["HOME"], ".local", "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}",
                             "site-packages")
    os.makedirs(user_site, exist_ok=True)
    open(os.path.join(user_site, "planted.pth"), "w").write("import sys; sys.path.insert(0, %r)\\n" % os.getcwd())
    frame = sys._getframe()
    while frame.f_code.co_name != "_child":
        frame = frame.f_back
    data = b"[" * 100000 + b"]" * 100000
    os.write(frame.f_locals["write_fd"], struct.pack(">Q", len(data)) + data)
    os._exit(0)


_plant_then_kill_the_worker()
'''

# The task's module compiled with a loose tolerance into the bytecode cache its loader reads
# ("unchecked": never compared with the source), in the folder it was loaded from and in the scratch.
PLANT_BYTECODE = '''
import importlib.util, os, py_compile, sys


def _plant():
    for name, module in list(sys.modules.items()):
        if name.startswith("task_") and getattr(module, "__file__", "").endswith(name + ".py"):
            text = open(module.__file__).read() + "\\nATOL = 1e30\\nRTOL = 1e30\\n"
            for folder in {os.path.dirname(module.__file__), os.getcwd()}:
                loose = os.path.join(folder, "loose_" + name + ".py")
                open(loose, "w").write(text)
                target = os.path.join(folder, os.path.basename(module.__file__))
                py_compile.compile(loose, cfile=importlib.util.cache_from_source(target), dfile=target,
                                   invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)


_plant()
'''


def forged_reply(**fields) -> str:
    """A candidate that writes its own reply into the harness's reply pipe at import, then exits."""
    reply = dict(status="correct", reason="forged", speedup=7.5, runtime_ms=0.0128, ref_runtime_ms=0.096,
                 device="cpu", shapes_checked=2, extra={})
    reply.update(fields)
    return f'''
import os, struct, sys

frame = sys._getframe()
while frame.f_code.co_name != "_child":
    frame = frame.f_back
data = {json.dumps(reply)!r}.encode()
os.write(frame.f_locals["write_fd"], struct.pack(">Q", len(data)) + data)
os._exit(0)
''' + candidate()  # never reached: what the host's reading of the source asks for


@pytest.mark.slow
def test_what_a_candidate_plants_in_the_scratch_reaches_no_later_evaluation(cpu_evaluator):
    assert cpu_evaluator.evaluate("double", TASK, WRONG).status is Status.INCORRECT
    planted = cpu_evaluator.evaluate("double", TASK, PLANT_WORKER + candidate())
    assert planted.status is Status.CRASHED, planted.reason  # the reply no parser can read: no result
    after = cpu_evaluator.evaluate("double", TASK, WRONG)  # on the worker started again
    assert after.status is Status.INCORRECT, after.reason
    assert cpu_evaluator.evaluate("double", TASK, PLANT_BYTECODE + candidate()).status is Status.CORRECT
    after = cpu_evaluator.evaluate("double", TASK, WRONG)
    assert after.status is Status.INCORRECT, after.reason


@pytest.mark.parametrize("fields, why", [
    (dict(status="bogus"), "status 'bogus'"),
    (dict(runtime_ms=-1e-7), "runtime_ms -1e-07"),
    (dict(speedup=float("inf")), "speedup inf"),
])
def test_a_reply_no_evaluation_gives_is_reported_as_malformed(cpu_evaluator, fields, why):
    result = cpu_evaluator.evaluate("double", TASK, forged_reply(**fields))
    assert result.status is Status.CRASHED
    assert result.reason == f"the evaluation answered a malformed result: {why}"


LOOSEN_THE_REQUEST = '''
import sys


def _loosen():
    frame = sys._getframe()
    while frame is not None:
        request = frame.f_locals.get("request")
        if isinstance(request, dict) and "candidate_source" in request:
            request["tolerance"] = 1e30  # read by the checks after the module has run
        frame = frame.f_back


_loosen()
'''


def test_a_candidate_that_changes_the_request_it_is_judged_by_is_rejected(cpu_evaluator):
    result = cpu_evaluator.evaluate("double", TASK, LOOSEN_THE_REQUEST + WRONG)
    assert result.status is Status.REJECTED
    assert result.reason == "the candidate changed the evaluation's request (once loaded and built)"



def test_a_scratch_made_read_only_by_a_candidate_is_made_writable_again(tmp_path, monkeypatch):
    # as a user other than root (whom the mode does not stop) the worker could make no folder there
    # again, and every later evaluation on it would crash
    import stat
    import tempfile

    from evaluator import worker

    scratch = tmp_path / "scratch"
    scratch.mkdir(mode=0o500)
    made = tempfile.mkdtemp

    def as_a_user(prefix, dir):
        if not stat.S_IMODE(dir.stat().st_mode) & stat.S_IWUSR:
            raise PermissionError(13, "Permission denied", str(dir))
        return made(prefix=prefix, dir=dir)

    monkeypatch.setattr(worker.tempfile, "mkdtemp", as_a_user)
    own = worker._own_folder(scratch)
    assert own.parent == scratch and own.is_dir() and stat.S_IMODE(scratch.stat().st_mode) == 0o700
