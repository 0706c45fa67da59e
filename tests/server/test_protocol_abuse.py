"""Messages of a logged-in analyst that must not stall a worker: a parameter number of 10⁸."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest
from raw_pg import connect, error_fields, msg, parse, until_ready
from server_harness import password, serving

ATTACKER, VICTIM = "mallory", "alice"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-abuse")
    yield from serving(home, analysts=[ATTACKER, VICTIM])


def _replies(sock, *messages: bytes) -> list[tuple[bytes, dict]]:
    """Send ``messages`` and Sync; each reply up to ReadyForQuery (an error's fields)."""
    sock.sendall(b"".join(messages) + msg(b"S"))
    return [(kind, error_fields(data) if kind == b"E" else {})
            for kind, data in until_ready(sock)]


def _pings_while(server, attack: Callable[[], None], sessions: int,
                 seconds: float = 3.0) -> tuple[list[float], list[float]]:
    """The victim's SELECT 1 latencies, quiet and then while ``sessions`` threads run
    ``attack`` in a loop."""
    stop = threading.Event()
    failures: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                attack()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            failures.append(err)

    with psycopg.connect(server.dsn(VICTIM), autocommit=True) as con:
        def ping() -> float:
            started = time.monotonic()
            assert con.execute("SELECT 1").fetchone() == (1,)
            return time.monotonic() - started

        quiet = [ping() for _ in range(20)]
        threads = [threading.Thread(target=loop) for _ in range(sessions)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        loaded, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            loaded.append(ping())
            time.sleep(0.02)
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not failures, failures
    return quiet, loaded


def test_a_parameter_number_no_bind_can_supply_is_refused_at_parse(server):
    """Describe of a prepared 'SELECT $100000000' built 10⁸ parameter types on the event loop
    (2.38 GB, 15.7 s; another session waited 7.4 s), then failed 08P01 on packing them."""
    sock = connect(server.pg_port, ATTACKER, password(ATTACKER))
    try:
        replies = _replies(sock, parse("s1", "SELECT $100000000"))
        assert [kind for kind, _ in replies] == [b"E", b"Z"]  # no ParseComplete
        assert replies[0][1]["C"] == "42601"
        assert replies[0][1]["M"].startswith("there is no parameter $100000000")
        assert [kind for kind, _ in _replies(sock, parse("s2", "SELECT $65535"))] == \
            [b"1", b"Z"]

        def attack() -> None:
            replies = _replies(sock, parse("s3", "SELECT $100000000"),
                               msg(b"D", b"Ss3\0"))
            assert [kind for kind, _ in replies] == [b"E", b"Z"]

        _, loaded = _pings_while(server, attack, sessions=1, seconds=1.5)
    finally:
        sock.close()
    assert max(loaded) < 1.0, loaded
