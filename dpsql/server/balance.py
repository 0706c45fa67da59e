"""One listening socket shared by forked workers, each connection to the least busy worker.

With asyncio's own accept loop the first worker to wake accepted every pending connection
(up to its backlog): eight analysts connecting at once all landed on one process, whose
engine threads share one GIL, while the other worker idled (about 200 queries/s with 8
clients on 2 cores instead of about 245 when they are split). Here each worker counts its
open sessions in memory shared with its siblings, and a worker serving more sessions than the
least busy one waits ``DEFER`` per session of difference (at most ``LONGEST``) before it
accepts, so the least busy worker takes the connection first; if it does not (it is busy
starting a session, stuck, or gone), the busier one accepts after the wait, so no connection
waits for long. A worker's slot counts only while it accepts: ``serve``'s parent marks the
slot of a worker that died ``GONE`` (its sessions died with it), and the replacement it forks
counts from zero once it accepts. The other counts the workers share are here too: each
address's HTTP connections awaiting headers (``AddressCounts``) and each analyst's requests
in the last minute (``RequestCounts``).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import hashlib
import logging
import math
import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable

import numpy as np

from dpsql.server.cancel import Routes

log = logging.getLogger("dpsql.server")

OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
DEFER = 0.02  # seconds per session of difference
LONGEST = 0.1  # the longest a worker lets a connection wait for a less busy sibling
GONE = -1  # the session count of a worker slot whose process is not accepting


class Sessions:
    """Open sessions per worker, in shared memory made before the workers are forked."""

    def __init__(self, workers: int) -> None:
        # each worker writes only its own slot, from its event loop, and the parent only the
        # slot of a worker that has exited: no lock needed
        self.counts = multiprocessing.RawArray("i", [GONE] * workers)
        self.cancels = Routes(workers)  # a CancelRequest read by one worker, to every worker

    def excess(self, worker: int) -> int:
        """How many more sessions ``worker`` serves than the least busy worker accepting."""
        return self.counts[worker] - min(count for count in self.counts if count != GONE)

    def gone(self, worker: int) -> None:
        """Count no sessions for ``worker``, whose process has exited (its siblings no longer
        wait for it to take connections)."""
        self.counts[worker] = GONE


class AddressCounts:
    """Connections of each client address waiting for their HTTP headers, over every worker,
    in shared memory made before the workers are forked (``Deadlines`` caps them): each
    worker writes only its own row, so there is no lock for a killed worker to leave held.
    An address is counted in one of ``SLOTS`` by a hash keyed with a secret drawn here, so a
    client cannot pick an address that shares another's count; addresses that happen to
    share one share its cap."""

    SLOTS = 1 << 16

    def __init__(self, workers: int) -> None:
        self._key = os.urandom(16)
        self._rows = [multiprocessing.RawArray("i", self.SLOTS) for _ in range(workers)]

    def slot(self, address: str) -> int:
        """Where ``address`` is counted."""
        digest = hashlib.blake2b(address.encode("utf-8", "surrogatepass"), key=self._key,
                                 digest_size=4).digest()
        return int.from_bytes(digest, "big") % self.SLOTS

    def add(self, worker: int, slot: int, change: int) -> None:
        """Count ``change`` more connections of ``worker`` waiting at ``slot``."""
        self._rows[worker][slot] += change

    def total(self, slot: int) -> int:
        """The connections waiting at ``slot`` in every worker."""
        return sum(row[slot] for row in self._rows)

    def gone(self, worker: int) -> None:
        """Count none for ``worker``, whose process has exited with its connections: left,
        they counted against their addresses' caps for as long as the server ran."""
        row = self._rows[worker]
        ctypes.memset(row, 0, ctypes.sizeof(row))


class RequestCounts:
    """Each analyst's requests in the last minute over every worker (``queries_per_minute``),
    in shared memory made before the workers are forked, counted per second in a ring of
    ``SECONDS``: the current second and the 60 before, so that two requests counted apart
    are 60 s apart or more. Each worker writes only its own row (no lock for a killed worker
    to leave held), and a worker's row outlives it: its replacement counts on in it. Counted
    in each process's memory before, a worker's death gave each of its analysts a fresh
    minute, and ``workers: N`` allowed N times the limit."""

    SECONDS = 61

    def __init__(self, workers: int, analysts: Iterable[str]) -> None:
        self._index = {name: i for i, name in enumerate(sorted(analysts))}
        shape = (workers, len(self._index), self.SECONDS)
        self._counts = _shared("i", shape)
        # the second (of time.monotonic(), one clock for every process) each count is of
        self._seconds = _shared("q", shape)
        self._lock = threading.Lock()  # a worker's engine threads share its row

    def allow(self, worker: int, analyst: str, per_minute: float, *,
              counting: bool = True) -> bool:
        """Count a request of ``analyst``'s in ``worker``, unless they have sent
        ``per_minute`` in the last minute (requests let in at the same moment by different
        workers may pass it by one each); not ``counting``, only whether one would be."""
        now = int(time.monotonic())
        which = self._index[analyst]
        counts, seconds = self._counts[:, which], self._seconds[:, which]
        with self._lock:
            if counts[now - seconds < self.SECONDS].sum() >= per_minute:
                return False
            if not counting:
                return True
            at = now % self.SECONDS
            if seconds[worker, at] != now:
                # zeroed before it is dated: a sibling reading between the two writes sees
                # a count of 0 (of some second), never the old count dated now
                counts[worker, at] = 0
                seconds[worker, at] = now
            counts[worker, at] += 1
            return True


def _shared(kind: str, shape: tuple[int, ...]) -> np.ndarray:
    """An array of zeros in memory shared with the processes forked after it is made."""
    return np.frombuffer(multiprocessing.RawArray(kind, math.prod(shape)),
                         dtype=kind).reshape(shape)


class Acceptor:
    """A worker's accept loop on the shared socket; ``close`` stops it and its sessions."""

    def __init__(self, sock: socket.socket, handle: Callable[..., Awaitable[None]],
                 sessions: Sessions, worker: int, limit: int) -> None:
        self._task = asyncio.create_task(_accept(sock, handle, sessions, worker, limit))

    def close(self) -> None:
        """Stop accepting and end this worker's sessions."""
        self._task.cancel()


async def _accept(sock: socket.socket, handle: Callable[..., Awaitable[None]],
                  sessions: Sessions, worker: int, limit: int) -> None:
    loop = asyncio.get_running_loop()
    running: set[asyncio.Task] = set()

    async def session(connection: socket.socket) -> None:
        try:
            reader, writer = await asyncio.open_connection(sock=connection, limit=limit)
            await handle(reader, writer)
        finally:
            sessions.counts[worker] -= 1

    sessions.counts[worker] = 0  # accepting from now
    try:
        while True:
            # how busy the siblings are is read once a connection waits: read before, a
            # worker went on with what they served then (the first connection after a
            # sibling was replaced went to the busier one, which had read its slot empty)
            await _pending(loop, sock)
            excess = sessions.excess(worker)
            if excess > 0:
                await asyncio.sleep(min(DEFER * excess, LONGEST))
            try:
                connection, _ = sock.accept()
            except BlockingIOError:  # a sibling took it
                continue
            except OSError as err:
                if err.errno not in OUT_OF_RESOURCES:
                    raise
                # as asyncio's own accept loop: one line, then a pause, never the end of it
                log.warning("socket.accept() out of system resource: %s", err)
                await asyncio.sleep(1.0)
                continue
            connection.setblocking(False)
            sessions.counts[worker] += 1
            task = asyncio.create_task(session(connection))
            running.add(task)
            task.add_done_callback(running.discard)
    finally:
        for task in running:
            task.cancel()


async def _pending(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Return once a connection waits on the listening ``sock`` (a sibling may take it)."""
    pending = loop.create_future()
    loop.add_reader(sock.fileno(), lambda: pending.done() or pending.set_result(None))
    try:
        await pending
    finally:
        loop.remove_reader(sock.fileno())
