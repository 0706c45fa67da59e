"""CancelRequests (psql's Ctrl-C, psycopg's ``conn.cancel()``): each session's process id and
secret key, and the way a cancel read by one worker reaches the worker running the session.

Workers share one listening socket, so the cancel's connection can land on any of them. Each
worker has a pipe, made before the workers are forked; a worker that reads a CancelRequest
writes its (process id, key) to every worker's pipe, and each looks the pair up among its own
sessions only. Nothing is answered either way, as PostgreSQL answers nothing: a wrong pair,
a session that has ended and one idle between statements are told apart by no one.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import struct
from collections.abc import Callable

PAIR = struct.Struct("!ii")


def new_key() -> tuple[int, int]:
    """A session's (process id, secret key): drawn, so that no client can guess another's."""
    return secrets.randbits(31), secrets.randbits(31)


class Routes:
    """One pipe per worker, made before the workers are forked (``balance.Sessions``)."""

    def __init__(self, workers: int) -> None:
        self._pipes = [os.pipe() for _ in range(workers)]
        for pipe in self._pipes:
            for fd in pipe:
                os.set_blocking(fd, False)

    def send(self, pair: tuple[int, int]) -> None:
        """Pass ``pair`` to every worker (one whose pipe is full misses it: a cancel is
        best effort, as PostgreSQL's)."""
        record = PAIR.pack(*pair)  # shorter than PIPE_BUF: written whole or not at all
        for _, write in self._pipes:
            try:
                os.write(write, record)
            except OSError:
                pass

    def listen(self, worker: int, deliver: Callable[[tuple[int, int]], None]) -> None:
        """Call ``deliver`` on this worker's event loop for each pair sent to it."""
        read = self._pipes[worker][0]

        def drain() -> None:
            try:
                data = os.read(read, PAIR.size * 256)
            except BlockingIOError:
                return
            for at in range(0, len(data) - PAIR.size + 1, PAIR.size):
                deliver(PAIR.unpack_from(data, at))

        asyncio.get_running_loop().add_reader(read, drain)
