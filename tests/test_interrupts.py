"""SIGINTs that come together count as one interrupt (evo.interrupts)."""
import os
import signal
import threading
import time

import pytest

from evo.interrupts import interrupted, one_interrupt


def test_signals_that_come_together_raise_one_keyboard_interrupt():
    raised = 0
    with one_interrupt(grace_s=5.0):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)  # the handler runs in the main thread between bytecodes
        except KeyboardInterrupt:
            raised += 1
            os.kill(os.getpid(), signal.SIGINT)  # the second, as the first unwinds: dropped
            time.sleep(0.5)
    assert raised == 1


def test_a_signal_after_the_grace_interrupts_again_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    with one_interrupt(grace_s=0.1):
        for _ in range(2):
            time.sleep(0.3)  # past the grace of the one before
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_signal_with_the_interrupt_handled_after_the_block_is_still_dropped():
    before = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(KeyboardInterrupt):
            with one_interrupt(grace_s=5.0):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGINT)  # on the way out (the CLI's exit with status 130): dropped
        time.sleep(0.5)
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_lock_broken_by_an_interrupt_counts_as_the_interrupt():
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError("release unlocked lock")  # what threading raised on an H100
    except RuntimeError as exc:
        assert interrupted(exc)
    assert not interrupted(RuntimeError("a bug"))


def test_outside_the_main_thread_nothing_is_installed():
    seen = []

    def body():
        with one_interrupt():
            seen.append(signal.getsignal(signal.SIGINT))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [signal.getsignal(signal.SIGINT)]
