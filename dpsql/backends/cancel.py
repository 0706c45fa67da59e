"""A client's cancel of the statement a thread runs (the server's CancelRequest).

The server runs each statement on an engine thread inside ``cancellable(cancel)``; a backend
reads the rows inside ``reading(interrupt)``, so that ``Cancel.request`` from another thread
calls ``interrupt`` while the rows are read, and only then: a cancel that comes before the read
stops it before it starts, one that comes after it does nothing. The lock makes ``request``
and the read's end exclusive, so no interrupt reaches the connection's next statement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext

from dpsql.errors import QueryCanceledError


class Cancel:
    """One statement's cancel: requested at most once, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requested = False
        self._interrupt: Callable[[], object] | None = None

    def request(self) -> None:
        """Stop the statement's read if it runs, else the read it is about to start."""
        with self._lock:
            self.requested = True
            if self._interrupt is not None:
                self._interrupt()

    @contextmanager
    def reading(self, interrupt: Callable[[], object]) -> Iterator[None]:
        """A read of rows that ``request`` stops with ``interrupt`` (refused at once when the
        cancel came first)."""
        with self._lock:
            if self.requested:
                raise QueryCanceledError("canceling statement due to user request")
            self._interrupt = interrupt
        try:
            yield
        finally:
            with self._lock:
                self._interrupt = None


_current = threading.local()


@contextmanager
def cancellable(cancel: Cancel) -> Iterator[None]:
    """Run this thread's statement under ``cancel``."""
    _current.cancel = cancel
    try:
        yield
    finally:
        _current.cancel = None


def reading(interrupt: Callable[[], object]):
    """The backend's read of rows, which the thread's cancel (if any) interrupts."""
    cancel = getattr(_current, "cancel", None)
    return nullcontext() if cancel is None else cancel.reading(interrupt)


def requested() -> bool:
    """Whether this thread's statement was cancelled (an interrupt was the cancel's)."""
    cancel = getattr(_current, "cancel", None)
    return cancel is not None and cancel.requested
