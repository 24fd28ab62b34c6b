"""The evaluation queue (evo.loop.scheduler): order, idle workers, lost evaluations, sources under way; and
the run loop's GIL switch interval (evo.loop.pacing)."""
from concurrent.futures import Future

import pytest

from evo.loop.pacing import Pacing
from evo.core.program import Program
from evo.loop.scheduler import MAX_LOST_EVALUATIONS, EvaluationQueue


def program(pid: int, task: str = "gelu") -> Program:
    return Program(id=pid, task=task, island=0, generation=1, operator="constants", source=f"src {pid}",
                   source_hash=f"h{pid}")


def test_idle_workers_take_programs_in_order_and_free_themselves_when_done():
    queue, submitted = EvaluationQueue(2, Pacing(2)), []

    def submit(worker, prog):
        future = Future()
        submitted.append((worker, prog.id, future))
        return future

    for pid in (1, 2, 3):
        queue.add(program(pid))
    queue.start(submit)
    assert [(w, p) for w, p, _ in submitted] == [(0, 1), (1, 2)]
    assert (queue.queued, queue.running) == (1, 2) and queue
    assert [p.id for p in queue.programs()] == [3, 1, 2]
    done = submitted[1][2]
    done.set_result(None)
    assert queue.owns(done)
    assert queue.finished(done)[0] == 1 and not queue.owns(done)
    queue.start(submit)
    assert submitted[-1][:2] == (1, 3)  # the freed worker takes the next program
    assert (queue.queued, queue.running) == (0, 2)


def test_a_lost_evaluation_goes_first_again_until_it_was_lost_too_often():
    queue = EvaluationQueue(1, Pacing(1))
    lost, other = program(7), program(8)
    queue.add(lost)
    queue.add(other)
    for count in range(1, MAX_LOST_EVALUATIONS + 2):
        started = []
        queue.start(lambda worker, p: started.append(p) or Future())
        assert started == [lost]  # before the program that was waiting
        _, back = queue.finished(queue.futures()[0])
        assert queue.lost(back) == (count if count <= MAX_LOST_EVALUATIONS else None)
    assert [p.id for p in queue.programs()] == [8]  # the last loss is the run loop's to charge


def test_a_source_is_under_way_until_its_result_is_recorded():
    queue = EvaluationQueue(1, Pacing(1))
    prog = program(1)
    queue.add(prog)
    assert queue.under_way("gelu", "h1") and not queue.under_way("softmax", "h1")
    future = Future()
    queue.start(lambda worker, p: future)
    assert queue.under_way("gelu", "h1")  # running
    queue.finished(future)
    assert queue.under_way("gelu", "h1")  # back, not yet recorded
    queue.recorded(prog)
    assert not queue.under_way("gelu", "h1") and not queue


def test_the_switch_interval_is_lowered_inside_the_block_and_restored_after_it():
    import sys

    from evo.loop.pacing import switch_interval

    before = sys.getswitchinterval()
    with switch_interval(before / 10):
        assert sys.getswitchinterval() == pytest.approx(before / 10)
    assert sys.getswitchinterval() == before
    with pytest.raises(RuntimeError), switch_interval(before / 10):
        raise RuntimeError("the run loop failed")
    assert sys.getswitchinterval() == before
    with switch_interval(None):  # offline operators: left as it is
        assert sys.getswitchinterval() == before
