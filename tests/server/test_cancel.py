"""CancelRequests: psycopg's ``conn.cancel()`` (psql's Ctrl-C) stops the session's running
statement with 57014, charged (the engine charges before it reads), with one worker and with
two (the cancel's connection may reach either); a wrong key stops nothing and is answered as
a right one is (not at all)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable

import httpx
import psycopg
import pytest
from server_harness import password, serving

CANCEL_REQUEST = 80877102


def joined(copies: int) -> str:
    """A private COUNT over visits joined with ``copies`` copies of the 5-row public table:
    about 4 s with 6, 250 s with 8 (DuckDB, 2 busy cores)."""
    return "SELECT COUNT(*) AS n FROM visits" + "".join(
        f" JOIN regions r{i} ON r{i}.region_id >= 0" for i in range(copies))


@pytest.fixture(scope="module", params=[1, 2], ids=["1 worker", "2 workers"])
def server(request, tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("cancel"), workers=request.param, extra={
        "limits": {"max_epsilon_per_query": 1.0, "timeout": 60, "max_rows": 1000,
                   "queries_per_minute": 100000}})


def run_while_cancelling(con: psycopg.Connection, sql: str,
                         cancel: Callable[[], None]) -> psycopg.Error | None:
    """Run ``sql`` on ``con`` while another thread calls ``cancel()`` again and again until
    it ends (a cancel that reaches the server before the statement does stops nothing, as
    PostgreSQL's); the error it ended with, None when it was answered."""
    ended = threading.Event()

    def cancelling() -> None:
        while not ended.wait(0.1):
            cancel()

    thread = threading.Thread(target=cancelling)
    thread.start()
    try:
        con.execute(sql)
        return None
    except psycopg.Error as err:
        return err
    finally:
        ended.set()
        thread.join(30)


def cancel_request(port: int, pid: int, key: int) -> bytes:
    """Send a CancelRequest as libpq does; what the server said before it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack("!IIii", 16, CANCEL_REQUEST, pid, key))
        return sock.recv(100)


def spent(server, user: str) -> float:
    body = httpx.get(server.http + "/api/v1/budget", auth=(user, password(user))).json()
    return body["visits"]["spent"]["epsilon"]


def test_a_cancel_stops_the_running_statement_charged(server):
    """Charged once the read began (the engine charges before it reads); a cancel that lands
    while the statement is planned refuses it with nothing charged."""
    charged = 0
    with psycopg.connect(server.dsn("alice"), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 0.001")
        for _ in range(3):  # with two workers, the cancel's connection lands on either
            err = run_while_cancelling(con, joined(8), con.cancel)
            assert err is not None and err.sqlstate == "57014", err
            message = err.diag.message_primary
            assert "cancel" in message and "charged" in message, message
            charged += "nothing was charged" not in message
            assert con.execute(joined(0)).fetchone() is not None  # the session goes on
    assert spent(server, "alice") == pytest.approx(0.001 * (charged + 1))


def test_a_cancelled_statement_over_public_tables_is_not_charged(server):
    public = "SELECT COUNT(*) AS n FROM regions r0" + "".join(
        f" JOIN regions r{i} ON r{i}.region_id >= 0" for i in range(1, 14))  # 5^14 rows
    with psycopg.connect(server.dsn("dave"), autocommit=True) as con:
        err = run_while_cancelling(con, public, con.cancel)
        assert err is not None and err.sqlstate == "57014", err
        assert "cancel" in err.diag.message_primary, err.diag.message_primary
    assert spent(server, "dave") == 0


def test_a_wrong_key_leaves_the_statement_to_finish(server):
    with psycopg.connect(server.dsn("bob"), autocommit=True) as con, \
            psycopg.connect(server.dsn("carol"), autocommit=True) as other:
        con.execute("SET dpsql.epsilon = 0.001")
        pid = con.info.backend_pid
        said = []
        err = run_while_cancelling(con, joined(5), lambda: said.extend([
            cancel_request(server.pg_port, pid, 12345),
            cancel_request(server.pg_port, other.info.backend_pid, 12345)]))
        assert err is None and said and set(said) == {b""}
    # a right key of an ended session: answered as a wrong one (not at all)
    assert cancel_request(server.pg_port, pid, 12345) == b""
