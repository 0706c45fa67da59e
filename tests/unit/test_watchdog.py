"""The deadline thread behind DuckDB's statement timeouts."""

from __future__ import annotations

import os
import select
import signal
import threading
import time

from dpsql.backends.watchdog import WATCHDOG, Watchdog


def test_overdue_interrupts_are_called_and_cancelled_ones_never():
    watchdog, called = Watchdog(), []
    late = watchdog.watch(0.05, lambda: called.append("late"))
    cancelled = watchdog.watch(0.05, lambda: called.append("cancelled"))
    soon = watchdog.watch(0.01, lambda: called.append("soon"))
    watchdog.cancel(cancelled)
    time.sleep(0.3)
    assert called == ["soon", "late"]
    watchdog.cancel(late)  # after it ran: nothing happens
    watchdog.cancel(soon)
    before = threading.active_count()
    for _ in range(100):
        watchdog.cancel(watchdog.watch(30, lambda: called.append("never")))
    assert threading.active_count() == before  # one thread for all, not one per statement


def test_a_failing_interrupt_does_not_stop_later_deadlines():
    watchdog, fired = Watchdog(), threading.Event()

    def broken():
        raise RuntimeError("connection closed")

    watchdog.watch(0, broken)
    watchdog.watch(0.05, fired.set)
    assert fired.wait(5)


def test_an_interrupt_running_when_cancel_is_called_has_finished_when_it_returns():
    watchdog, running, done = Watchdog(), threading.Event(), []

    def slow_interrupt():
        running.set()
        time.sleep(0.1)
        done.append(True)

    token = watchdog.watch(0, slow_interrupt)
    running.wait(5)
    watchdog.cancel(token)
    assert done == [True]


def test_a_forked_child_gets_a_working_deadline_thread():
    """A server forks its workers; the parent's thread does not exist in a child."""
    WATCHDOG.cancel(WATCHDOG.watch(30, lambda: None))  # the parent's thread exists
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        fired = threading.Event()
        WATCHDOG.watch(0.01, fired.set)
        os.write(write, b"1" if fired.wait(5) else b"0")
        os._exit(0)
    os.close(write)
    ready, _, _ = select.select([read], [], [], 10)
    answer = os.read(read, 1) if ready else b"timeout"
    if not ready:
        os.kill(child, signal.SIGKILL)
    os.waitpid(child, 0)
    assert answer == b"1"


def test_cancel_tells_whether_the_deadline_passed():
    """An interrupt that reaches a DuckDB connection before its statement starts is lost,
    and the statement runs to its end: the caller learns from ``cancel`` that the deadline
    passed, and treats the statement as timed out."""
    watchdog = Watchdog()
    assert watchdog.cancel(watchdog.watch(30, lambda: None)) is False
    overdue = watchdog.watch(0.001, lambda: None)
    time.sleep(0.05)
    assert watchdog.cancel(overdue) is True
