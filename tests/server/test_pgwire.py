"""Protocol details no driver exercises, sent with a bare wire-protocol client."""

from __future__ import annotations

import httpx
import pytest
from raw_pg import bind, connect, error_fields, execute, msg, parse, until_ready
from server_harness import password, server  # noqa: F401 - the fixture

USER = "mia"  # this module's analyst only


def spent(server) -> float:
    body = httpx.get(server.http + "/api/v1/budget", auth=(USER, password(USER))).json()
    return body["visits"]["spent"]["epsilon"]


@pytest.fixture
def session(server):
    sock = connect(server.pg_port, USER, password(USER))
    yield sock
    sock.close()


def kinds(messages) -> list[bytes]:
    return [kind for kind, _ in messages]


def test_text_after_a_nul_or_bytes_not_utf8_are_refused_before_any_spend(server, session):
    before = spent(server)
    session.sendall(msg(b"Q", b"SELECT COUNT(*) AS n FROM visits\0; SELECT 1\0"))
    replies = until_ready(session)
    assert kinds(replies) == [b"E", b"Z"]
    assert error_fields(replies[0][1])["C"] == "08P01"
    session.sendall(msg(b"Q", b"SELECT COUNT(*) AS n FROM visits WHERE day = '\xff'\0"))
    replies = until_ready(session)
    assert kinds(replies) == [b"E", b"Z"]
    assert error_fields(replies[0][1])["C"] == "22021"
    session.sendall(parse("", "SELECT COUNT(*) AS n FROM visits WHERE day = $1") +
                    bind("", "", [b"\xffMon"]) + execute("") + msg(b"S"))
    replies = until_ready(session)
    assert error_fields(dict(replies)[b"E"])["C"] == "22021"
    assert spent(server) == before


def test_bind_with_too_few_values_is_a_protocol_error(server, session):
    session.sendall(parse("two", "SELECT COUNT(*) AS n FROM visits WHERE region_id = $1 AND "
                                 "day = $2") + bind("", "two", [b"1"]) + msg(b"S"))
    replies = until_ready(session)
    fields = error_fields(dict(replies)[b"E"])
    assert fields["C"] == "08P01"
    assert fields["M"] == "bind message supplies 1 parameters, but prepared statement 'two' " \
                          "requires 2"


def test_execute_with_a_row_limit_suspends_and_continues_without_a_new_charge(server,
                                                                                 session):
    before = spent(server)
    session.sendall(parse("", "SELECT day, COUNT(*) AS n FROM visits WHERE region_id = 2 "
                              "GROUP BY day") + bind("p", "", []) + execute("p", 3) +
                    execute("p", 3) + execute("p", 3) + execute("p", 3) + msg(b"S"))
    replies = [k for k in kinds(until_ready(session)) if k != b"N"]
    assert replies == [b"1", b"2", *[b"D"] * 3, b"s", *[b"D"] * 3, b"s", b"D", b"C", b"C",
                       b"Z"]
    assert spent(server) == pytest.approx(before + 0.25)  # one release, however it is fetched


def _names(row_description: bytes) -> list[str]:
    """Column names of a RowDescription message body."""
    count, pos, names = int.from_bytes(row_description[:2], "big"), 2, []
    for _ in range(count):
        end = row_description.index(b"\0", pos)
        names.append(row_description[pos:end].decode())
        pos = end + 1 + 18  # table oid, column, type oid, size, modifier, format
    return names


def test_describe_of_a_prepared_select_gives_its_columns_without_a_charge(server, session):
    """Drivers read a prepared statement's columns before they bind: they were NoData.
    Planned with the parameter NULL, nothing spent."""
    before = spent(server)
    session.sendall(parse("q", "SELECT day, COUNT(*) AS n FROM visits WHERE amount > $1 "
                               "GROUP BY day") + msg(b"D", b"Sq\0") + msg(b"S"))
    replies = until_ready(session)
    assert kinds(replies) == [b"1", b"t", b"T", b"Z"]
    assert _names(replies[2][1]) == ["day", "n", "n_low", "n_high"]
    session.sendall(parse("s", "SET TIME ZONE 'UTC'") + msg(b"D", b"Ss\0") + msg(b"S"))
    assert kinds(until_ready(session)) == [b"1", b"t", b"n", b"Z"]
    assert spent(server) == before
