"""What dpsql does when the interpreter exits: close the connections still open, then skip
the interpreter's final cyclic garbage collections.

Once a process has connected, it holds the query stack's long-lived objects: sqlglot's
~1,100 expression classes, its parsed generator templates, DuckDB's module objects (42,000
GC-tracked objects against 21,000 in a process that only uses DuckDB). At exit CPython runs
full collections over all of them while it tears the modules down; that cost ~40 ms per
process here, more than the 10⁶-row query itself (``benchmarks/startup.py``). Freezing the
GC (``gc.freeze``) as the last thing dpsql does keeps those objects out of the final
collections; the operating system reclaims their memory.

What this changes for the host program: objects that are cyclic garbage at exit are not
finalized. CPython does not promise ``__del__`` of objects still alive at exit (the
reference manual, ``object.__del__``), and ``atexit`` handlers and ``weakref.finalize``
callbacks still run. dpsql's own resources are released explicitly first: every connection
still open is closed (DuckDB's spill folder removed, the ledger's SQLite file closed), but
not in a forked child, where they are the parent's.
``DPSQL_EXIT_COLLECT=1`` keeps the collections.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import weakref
from typing import Protocol


class _Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[_Closable] = weakref.WeakSet()
_registered = False


def track(connection: _Closable) -> None:
    """Close ``connection`` at exit if it is still open then; the first call registers the
    exit handler."""
    global _registered
    if not _registered:
        atexit.register(_at_exit)
        _registered = True
    _open.add(connection)


# a forked child leaves its parent's connections alone: closing one there would remove the
# spill folder the parent is still using
os.register_at_fork(after_in_child=_open.clear)


def _at_exit() -> None:
    for connection in list(_open):
        # one failing close must not keep the other connections open or the GC unfrozen;
        # closing releases and charges nothing
        with contextlib.suppress(Exception):
            connection.close()
    if os.environ.get("DPSQL_EXIT_COLLECT") != "1":
        gc.freeze()
