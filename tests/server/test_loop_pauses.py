"""A worker's event loop does not wait for SQLite's locks: a login waiting for another
process's transaction on logins.sqlite leaves the other sessions of the worker answered."""

from __future__ import annotations

import sqlite3
import threading
import time

import psycopg
import pytest
from server_harness import serving

HOLD = 1.5  # seconds another process holds the login counts' write lock


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-pauses"), analysts=["alice", "bob"])


def _ping(con) -> float:
    start = time.monotonic()
    assert con.execute("SELECT 1").fetchone() == (1,)
    return time.monotonic() - start


def test_a_login_waiting_for_the_login_counts_lock_stops_no_other_session(server):
    # the login's BEGIN IMMEDIATE waited on the event loop: alice's SELECT 1 took 1.2 s
    with psycopg.connect(server.dsn("alice"), autocommit=True) as alice:
        assert _ping(alice) < 0.5
        holder = sqlite3.connect(server.state / "logins.sqlite", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        logged_in: list[str] = []

        def login() -> None:
            with psycopg.connect(server.dsn("bob"), autocommit=True) as bob:
                logged_in.append(bob.execute("SELECT 1").fetchone() and "bob")

        thread = threading.Thread(target=login)
        started = time.monotonic()
        thread.start()
        time.sleep(0.3)  # bob's login is waiting for the lock now
        pings = []
        while time.monotonic() - started < HOLD:
            pings.append(_ping(alice))
        holder.execute("ROLLBACK")
        holder.close()
        thread.join(10)
    assert max(pings) < 0.3, pings
    assert logged_in == ["bob"]

