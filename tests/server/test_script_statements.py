"""Each statement of a simple Query of several is a request: counted against the analyst's
``queries_per_minute`` (those the server answers itself too, once each) and answered with
the worker's event loop free in between. 1,777 'SELECT 1;' in one 16 KB message were
answered uncounted, one after the other on the loop, which they held ~220 ms."""

from __future__ import annotations

import array
import asyncio

import pytest
import yaml
from raw_pg import connect, error_fields, msg, until_ready
from server_harness import password, serving, write_config

from dpsql.server import pgparams
from dpsql.server.pgwire import Session, _Result

LIMITED = ["carol", "dave", "erin"]  # three requests a minute each
LONG = "SELECT '" + "a" * 2100 + "' AS x"  # read on an engine thread (INLINE_SQL)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-scripts")
    config = write_config(home, analysts=LIMITED)
    raw = yaml.safe_load(config.read_text())
    for name in LIMITED:
        raw["analysts"][name]["limits"] = {"queries_per_minute": 3}
    config.write_text(yaml.safe_dump(raw))
    yield from serving(home, config)


def _query(server, user: str, sql: str) -> list[tuple[bytes, dict]]:
    sock = connect(server.pg_port, user, password(user))
    try:
        sock.sendall(msg(b"Q", sql.encode() + b"\0"))
        return [(kind, error_fields(data) if kind == b"E" else {})
                for kind, data in until_ready(sock)]
    finally:
        sock.close()


def test_every_statement_of_a_script_counts_against_queries_per_minute(server):
    replies = _query(server, "carol", "SELECT 1; SELECT 1; SELECT 1; SELECT 1; SELECT 1")
    assert [kind for kind, _ in replies].count(b"C") == 3
    errors = [fields for kind, fields in replies if kind == b"E"]
    assert [(e["C"], e["D"]) for e in errors] == [("53300", "dpsql code: rate_limited")]
    assert replies[-1][0] == b"Z"


def test_a_release_in_a_script_is_counted_once(server):
    # counted twice (before it ran, and again by the service) the third statement was refused
    replies = _query(server, "dave", "SET dpsql.epsilon = 0.1; "
                     "SELECT COUNT(*) AS n FROM visits; SELECT 1")
    assert [kind for kind, _ in replies if kind in b"CE"] == [b"C", b"C", b"C"]


def test_long_statements_counted_in_a_script_are_read_and_one_past_the_limit_is_not(server):
    replies = _query(server, "erin", f"{LONG}; {LONG}; {LONG}")
    assert [kind for kind, _ in replies if kind in b"CE"] == [b"C", b"C", b"C"]
    # no request left this minute: a long text is refused before it is read on a thread
    # (a short SELECT 1 alone is answered uncounted, as before)
    replies = _query(server, "erin", LONG)
    assert [(kind, fields.get("C")) for kind, fields in replies] == [(b"E", "53300"),
                                                                     (b"Z", None)]
    assert [kind for kind, _ in _query(server, "erin", "SELECT 1")] == [b"T", b"D", b"C",
                                                                        b"Z"]


class _Writer:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def get_extra_info(self, name: str):
        return None

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Service:
    """What a session calls of the service here: sizes, request counts, slots."""

    def __init__(self, events: list) -> None:
        self.events = events

    def check_size(self, user: str, sql: str) -> None:
        pass

    def count(self, user: str, *, counting: bool = True) -> None:
        self.events.append(("count", user) if counting else ("room", user))

    def catalogue(self, user: str, dataset: str) -> dict:
        return {dataset: {"tables": {}}}

    def in_slot(self, user: str, function, *args):
        self.events.append(("slot", user, function))
        return function(*args)


def _session(events: list) -> Session:
    """A session whose statements are recorded in ``events`` (with whether they were
    counted already), not run."""
    server = type("Server", (), {"service": _Service(events), "executor": None})()
    session = Session(server, None, _Writer())
    session.user, session.dataset = "carol", "visits"

    async def run(sql: str, params=None) -> _Result:
        events.append(("run", sql, getattr(session, "prepaid", None)))
        return _Result("SET")

    session.run = run
    return session


def test_the_statements_of_a_script_are_counted_and_leave_the_loop_free_between_them():
    events: list = []
    session = _session(events)

    async def main() -> None:
        done = False

        async def other() -> None:  # another session of the worker, ready all along
            while not done:
                events.append(("other",))
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        await session.simple_query(b"SET a = 1; SET b = 2; SET c = 3\0")
        done = True
        await task

    asyncio.run(main())
    ran = [i for i, event in enumerate(events) if event[0] == "run"]
    assert [events[i][1:] for i in ran] == [("SET a = 1", True), ("SET b = 2", True),
                                          ("SET c = 3", True)]
    assert all(events[i - 1] == ("count", "carol") for i in ran)
    # the other session ran between each two statements
    assert all(("other",) in events[a:b] for a, b in zip(ran, ran[1:]))
    assert session.prepaid is False


def test_a_single_statement_is_counted_by_the_service_alone():
    events: list = []
    session = _session(events)
    asyncio.run(session.simple_query(b"SET a = 1\0"))
    assert events == [("run", "SET a = 1", False)]


def test_describe_reads_parameter_types_in_one_of_the_analysts_slots():
    # on the engine threads outside the slots, 12 sessions pipelining a 16 KB Parse and a
    # Describe took another analyst's EXPLAIN from 12 to 991 ms (p50)
    events: list = []
    session = _session(events)
    oids = asyncio.run(session._parameter_types("SELECT $1", [1], array.array("I", [0])))
    assert len(oids) == 1
    assert events == [("slot", "carol", pgparams.types)]
