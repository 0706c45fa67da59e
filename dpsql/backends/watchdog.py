"""Deadlines for running queries: one thread per process calls each overdue interrupt.

A ``threading.Timer`` per query started and joined a thread for every statement; on a server
whose threads share one interpreter that was 5% of the time spent holding the GIL. Here one
daemon thread sleeps until the nearest deadline. ``cancel`` takes the same lock the thread
holds while it calls an interrupt, so when ``cancel`` returns the interrupt has either been
called already or never will be: none can reach the connection's next statement.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable


class Watchdog:
    """Calls ``interrupt`` of every watched statement still running at its deadline."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._due: dict[int, tuple[float, Callable[[], object]]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None
        self._wakes_at: float | None = None  # the deadline the thread sleeps until (None: all)

    def watch(self, seconds: float, interrupt: Callable[[], object]) -> int:
        """Call ``interrupt`` after ``seconds`` unless ``cancel`` comes first; a token."""
        with self._lock:
            token = next(self._tokens)
            deadline = time.monotonic() + seconds
            self._due[token] = (deadline, interrupt)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dpsql-deadlines",
                                                daemon=True)
                self._thread.start()
            elif self._wakes_at is None or deadline < self._wakes_at:
                self._changed.notify()  # (a later deadline than the one awaited needs no wake)
            return token

    def cancel(self, token: int) -> bool:
        """The statement ended: its interrupt is not called after this returns. True when its
        deadline had passed (its interrupt called, or due): an interrupt that reached the
        connection before the statement started was lost, and the statement ran on."""
        with self._lock:
            due = self._due.pop(token, None)
            return due is None or due[0] <= time.monotonic()

    def _run(self) -> None:
        with self._lock:
            while True:
                now = time.monotonic()
                for token in [t for t, (deadline, _) in self._due.items() if deadline <= now]:
                    try:
                        self._due.pop(token)[1]()
                    except Exception:  # noqa: BLE001 - one failed interrupt must not end
                        pass  # the thread that serves every later deadline
                self._wakes_at = min((deadline for deadline, _ in self._due.values()),
                                     default=None)
                self._changed.wait(None if self._wakes_at is None else self._wakes_at - now)


WATCHDOG = Watchdog()
# a forked worker inherits the lock's state and the parent's thread object, not the thread
os.register_at_fork(after_in_child=WATCHDOG._reset)
