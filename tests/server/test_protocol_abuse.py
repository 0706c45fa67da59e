"""Messages of a logged-in analyst that must not stall a worker or flood its log: a parameter
number of 10⁸, psql catalogue queries too deep to read or sent without limit."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import psycopg
import pytest
import yaml
from raw_pg import connect, error_fields, msg, parse, until_ready
from server_harness import password, serving, write_config

ATTACKER, VICTIM, SLOWED = "mallory", "alice", "rita"
# 4 KiB naming pg_class: read on the event loop it held it 110-200 ms a message, then logged a
# RecursionError's traceback (188 KB of log a message)
DEEP = "select a" + ".a" * 2034 + " from pg_class"
TABLES = "SELECT c.relname FROM pg_catalog.pg_class c WHERE c.relkind = 'r'"  # as psql's \dt


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-abuse")
    config = write_config(home, analysts=[ATTACKER, VICTIM, SLOWED])
    raw = yaml.safe_load(config.read_text())
    raw["analysts"][SLOWED]["limits"] = {"queries_per_minute": 3}
    config.write_text(yaml.safe_dump(raw))
    yield from serving(home, config)


def _replies(sock, *messages: bytes) -> list[tuple[bytes, dict]]:
    """Send ``messages`` and Sync; each reply up to ReadyForQuery (an error's fields)."""
    sock.sendall(b"".join(messages) + msg(b"S"))
    return [(kind, error_fields(data) if kind == b"E" else {})
            for kind, data in until_ready(sock)]


def _query(sock, sql: str) -> list[tuple[bytes, dict]]:
    sock.sendall(msg(b"Q", sql.encode() + b"\0"))
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


def test_catalogue_queries_are_read_off_the_event_loop_and_refused_quietly(server):
    """Four sessions sending 4 KiB of 'select a.a.a... from pg_class' held the event loop
    (another analyst's SELECT 1 at p50 0.6 s, 1.4 s with eight) and each logged a traceback;
    now they are read on a worker thread in one of the attacker's two slots."""
    codes: list[str] = []
    lock = threading.Lock()
    sockets = [connect(server.pg_port, ATTACKER, password(ATTACKER)) for _ in range(4)]
    index = iter(range(len(sockets)))
    local = threading.local()

    def attack() -> None:
        if not hasattr(local, "sock"):
            with lock:
                local.sock = sockets[next(index)]
        replies = _query(local.sock, DEEP)
        with lock:
            codes.extend(fields["C"] for kind, fields in replies if kind == b"E")

    logged = server.log.stat().st_size
    try:
        quiet, loaded = _pings_while(server, attack, sessions=len(sockets))
    finally:
        for sock in sockets:
            sock.close()
    # refused as not one of psql's queries (0A000), or while both slots are taken (53300)
    assert set(codes) <= {"0A000", "53300"} and "0A000" in codes, set(codes)
    with server.log.open("rb") as log:
        log.seek(logged)
        assert b"Traceback" not in log.read()
    # the old code's p50 was 0.6 s on a quiet machine; 0.4 s leaves room for a loaded one (a
    # like margin of 0.3 s failed a CI run under load in test_hardening, now tested otherwise)
    assert statistics.median(loaded) < statistics.median(quiet) + 0.4, (quiet, loaded)


def test_catalogue_shapes_psql_does_not_send_are_refused_as_such(server):
    """Their TypeError and IndexError were the server's failures (XX000, a traceback)."""
    sock = connect(server.pg_port, ATTACKER, password(ATTACKER))
    try:
        for sql in ("select 1 from pg_class where relname ~ 1",
                    "select col_description(1) from pg_class",
                    "select " + "(" * 300 + "1" + ")" * 300 + " from pg_class"):
            refused = _query(sock, sql)
            assert refused[0][0] == b"E" and refused[0][1]["C"] == "0A000", (sql, refused)
            assert "not this query of the system catalogues" in refused[0][1]["M"]
    finally:
        sock.close()


def test_catalogue_queries_count_against_the_rate_limit(server):
    """psql's catalogue queries were answered however many an analyst sent (the rate limit
    counted only what reached the engine); a ping is still answered past the limit."""
    sock = connect(server.pg_port, SLOWED, password(SLOWED))
    try:
        for _ in range(3):
            assert [kind for kind, _ in _query(sock, TABLES)] == [b"T", b"D", b"D", b"C", b"Z"]
        refused = _query(sock, TABLES)
        assert refused[0][0] == b"E" and refused[0][1]["C"] == "53300"
        assert "per minute" in refused[0][1]["M"]
        assert [kind for kind, _ in _query(sock, "SELECT 1")] == [b"T", b"D", b"C", b"Z"]
    finally:
        sock.close()
