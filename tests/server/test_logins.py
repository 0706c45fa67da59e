"""Logins across the server's two ports: one lockout for both, and every outcome audited."""

from __future__ import annotations

import socket
import sqlite3
import struct
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest
from raw_pg import _read
from server_harness import password, serving

USERS = ["lena", "otto", "pia", "rolf"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-logins")
    yield from serving(home, analysts=USERS)


def test_failures_on_one_port_lock_out_the_other(server):
    """Each port had a limiter of its own: 3 wrong passwords on the PostgreSQL port and 3
    more over HTTP were checked, where 3 in all may be (max_failed_logins: 3)."""
    for _ in range(3):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn("lena", "guess"))
    r = httpx.get(server.http + "/api/v1/me", auth=("lena", password("lena")), timeout=30)
    assert r.status_code == 429, r.text
    for i in range(3):
        r = httpx.get(server.http + "/api/v1/me", auth=("otto", f"guess{i}"), timeout=30)
        assert r.status_code == 401, r.text
    with pytest.raises(psycopg.OperationalError, match="too many failed logins"):
        psycopg.connect(server.dsn("otto"))


def _logins(server, user: str) -> list[tuple[str, str | None]]:
    with sqlite3.connect(server.state / "audit.sqlite") as audit:
        return audit.execute("SELECT outcome, code FROM requests WHERE analyst = ? AND "
                             "action = 'login' ORDER BY id", (user,)).fetchall()


def _stall(server, user: str) -> bytes:
    """Start a login, read the AuthenticationSASL and send nothing more: what the server
    sends before it closes the connection."""
    with socket.create_connection(("127.0.0.1", server.pg_port), timeout=30) as sock:
        startup = struct.pack("!I", 196608) + b"user\0" + user.encode() + \
            b"\0database\0visits\0\0"
        sock.sendall(struct.pack("!I", len(startup) + 4) + startup)
        assert _read(sock)[0] == b"R"
        return sock.recv(100)


def test_a_login_that_stalls_is_audited_and_not_a_password_failure(server):
    """A client stalled mid-authentication past startup_timeout (2 s) was closed with nothing
    in the audit (yet counted as a wrong password: 3 stalls locked the user out)."""
    started = time.monotonic()
    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(lambda _: _stall(server, "pia"), range(3))) == [b""] * 3
    assert time.monotonic() - started < 10
    assert _logins(server, "pia") == [("refused", "auth_timeout")] * 3
    assert server.log.read_text().count(
        "login user=pia interface=pg address=127.0.0.1 outcome=refused code=auth_timeout") == 3
    psycopg.connect(server.dsn("pia")).close()  # it tried no password: not locked out
    assert _logins(server, "pia")[-1] == ("ok", None)


def test_a_client_that_hangs_up_when_asked_for_a_password_is_not_locked_out(server):
    """libpq (psql, psycopg) without a password hangs up at the server's AuthenticationSASL
    (psql then asks for the password and connects again): each was a failed login, and 3 in
    a minute locked the user out."""
    for _ in range(4):
        with pytest.raises(psycopg.OperationalError, match="no password supplied"):
            psycopg.connect(f"host=127.0.0.1 port={server.pg_port} user=rolf dbname=visits "
                            "password='' passfile=/nonexistent connect_timeout=10")
    psycopg.connect(server.dsn("rolf")).close()
    assert _logins(server, "rolf") == [("abandoned", None)] * 4 + [("ok", None)]
