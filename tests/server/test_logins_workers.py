"""The failed-login limit with ``workers: 2``: one count for every worker and both ports, kept
in ``state_dir/logins.sqlite``. Each worker counted alone, so a guesser whose connections
reached both had twice ``max_failed_logins`` (6 checked of 3 with 30 guesses)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from server_harness import password, serving

USERS = ["lena", "otto", "pia", "rolf"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-logins-workers")
    yield from serving(home, analysts=USERS, workers=2)


def _psql(server, user: str, pw: str) -> str:
    """psql's outcome: 'ok', 'failed' (the password was checked) or 'locked'."""
    out = subprocess.run(["psql", "-X", "-w", "-c", "SELECT 1",
                          f"host=127.0.0.1 port={server.pg_port} user={user} dbname=visits"],
                         capture_output=True, text=True, timeout=30, check=False,
                         env={**os.environ, "PGPASSWORD": pw, "PGCONNECT_TIMEOUT": "10"})
    return _outcome(out.stderr) if out.returncode else "ok"


def _psycopg(server, user: str, pw: str) -> str:
    try:
        psycopg.connect(server.dsn(user, pw)).close()
    except psycopg.OperationalError as err:
        return _outcome(str(err))
    return "ok"


def _outcome(message: str) -> str:
    if "password authentication failed" in message:
        return "failed"
    return "locked" if "too many failed logins" in message else message


def _http(server, user: str, pw: str) -> str:
    with httpx.Client() as client:  # a connection of its own: either worker may take it
        status = client.get(server.http + "/api/v1/me", auth=(user, pw), timeout=30).status_code
    return {200: "ok", 401: "failed", 429: "locked"}.get(status, str(status))


def _rows(server) -> tuple[int, int]:
    with sqlite3.connect(server.state / "logins.sqlite") as db:
        return (db.execute("SELECT count(*) FROM failures").fetchone()[0],
                db.execute("SELECT count(*) FROM pending").fetchone()[0])


def test_guesses_on_both_workers_and_ports_are_capped(server):
    """30 wrong passwords, one connection each, over psql, psycopg and HTTP: 6 were checked
    (3 on each worker) where max_failed_logins 3 allows 3; then the right one is refused on
    both ports, and further guesses write nothing."""
    clients = (_psql, _psycopg, _http)
    outcomes = [clients[i % 3](server, "lena", f"guess{i}") for i in range(30)]
    assert outcomes.count("failed") == 3 and outcomes.count("locked") == 27, outcomes
    assert [client(server, "lena", password("lena")) for client in clients] == ["locked"] * 3
    rows = _rows(server)
    assert rows == (9, 0)  # a row per failure and count: (name, address), name, address
    for i in range(20):
        assert clients[i % 3](server, "lena", f"more{i}") == "locked"
    assert _rows(server) == rows
    failed = [line for line in server.log.read_text().splitlines()
              if "login user=lena " in line and "code=auth_failed" in line]
    assert len(failed) == 3, failed


def test_guesses_sent_together_to_both_workers_are_capped(server):
    """40 guesses at once over both ports: each worker let in max_failed_logins before any
    failure was recorded (its logins in progress were counted in that process alone)."""
    def guess(i: int) -> str:
        return (_psycopg if i % 2 else _http)(server, "otto", f"guess{i}")

    with ThreadPoolExecutor(40) as pool:
        outcomes = list(pool.map(guess, range(40)))
    assert outcomes.count("failed") <= 3 and "ok" not in outcomes, outcomes
    assert _psycopg(server, "otto", password("otto")) == "locked"
    assert _http(server, "otto", password("otto")) == "locked"


def test_correct_logins_on_both_workers_all_get_in(server):
    """Logins past the limit wait for those in progress, on either worker: 16 right
    passwords at once all get in."""
    def login(i: int) -> str:
        return (_psycopg if i % 2 else _http)(server, "pia", password("pia"))

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(login, range(16))) == ["ok"] * 16


_HOLDER = """
import os, sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
db.execute("INSERT INTO failures (key, few, at) VALUES (x'00', 1, ?)", (time.time(),))
print("holding", flush=True)
time.sleep(60)
"""

_STALLED = """
import asyncio, sys
from dpsql.server.auth import LoginLimiter
limiter = LoginLimiter(3, 30, path=sys.argv[1], hold=1.5)
async def main():
    for _ in range(3):
        assert await limiter.attempt("rolf", "127.0.0.1", known=True)
asyncio.run(main())
print("holding", flush=True)
import time; time.sleep(60)
"""


def _killed_while(script: str, server) -> float:
    """Run ``script`` on the server's logins.sqlite until it prints, SIGKILL it: when."""
    holder = subprocess.Popen([sys.executable, "-c", script, str(server.state / "logins.sqlite")],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "holding\n"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)
    holder.stdout.close()
    return time.monotonic()


def test_a_worker_killed_mid_transaction_or_mid_login_locks_nobody_out(server):
    """A process killed inside its write transaction leaves neither the lock nor its rows;
    one killed with 3 logins in progress (rolf's limit) holds them for its ``hold`` only."""
    killed = _killed_while(_HOLDER, server)
    assert _psycopg(server, "rolf", password("rolf")) == "ok"
    assert _http(server, "rolf", password("rolf")) == "ok"
    assert time.monotonic() - killed < 2
    with sqlite3.connect(server.state / "logins.sqlite") as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("SELECT count(*) FROM failures WHERE key = x'00'").fetchone()[0] == 0
    killed = _killed_while(_STALLED, server)
    assert _rows(server)[1] == 9  # its 3 logins hold 3 counts each
    assert _psycopg(server, "rolf", password("rolf")) == "ok"  # waits out their 1.5 s
    assert 1.0 < time.monotonic() - killed < 4
