"""A Bind's result format codes are counted against the statement's columns before it runs,
as PostgreSQL does (08P01 at Bind): the count was checked when the rows were sent, after the
statement had run and its ε had been charged."""

from __future__ import annotations

import struct

import pytest
from raw_pg import connect, error_fields, execute, msg, parse, until_ready
from server_harness import password, serving
from test_psql import spent

COUNT = "SELECT COUNT(*) AS n FROM visits"  # n, n_low, n_high: three columns


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-formats"), analysts=["fay", "gus"])


def bind(codes: list[int], portal: str = "") -> bytes:
    """A Bind of the unnamed statement without parameters, asking ``codes`` result formats."""
    return msg(b"B", portal.encode() + b"\0\0" + struct.pack("!HH", 0, 0) +
               struct.pack(f"!H{len(codes)}h", len(codes), *codes))


def exchange(sock, sql: str, codes: list[int]) -> list[tuple[bytes, bytes]]:
    """Parse, Bind with ``codes``, Describe the portal, Execute and Sync."""
    sock.sendall(parse("", sql) + bind(codes) + msg(b"D", b"P\0") + execute("") + msg(b"S"))
    return until_ready(sock)


def test_a_format_count_that_fits_no_column_count_is_refused_before_it_is_charged(server):
    with connect(server.pg_port, "fay", password("fay")) as sock:
        for codes in ([0, 0], [1, 0, 1, 0]):
            replies = exchange(sock, COUNT, codes)
            assert [kind for kind, _ in replies] == [b"1", b"E", b"Z"]
            error = error_fields(replies[1][1])
            assert error["C"] == "08P01"
            assert error["M"] == f"bind message has {len(codes)} result formats but query " \
                                 "has 3 columns"
            assert "3 columns Describe reports" in error["H"]
        # a column's formats are as many as its columns, then one code for all
        assert spent(server, "fay") == 0
        replies = exchange(sock, COUNT, [0, 1, 1])
        assert [kind for kind, _ in replies if kind in b"TDCE"] == [b"T", b"D", b"C"]
        # public statements and the server's own answers are counted alike (nothing spent)
        for sql, count in (("SELECT region_id, name FROM regions", 2),
                           ("SELECT 1 AS x", 1)):
            replies = exchange(sock, sql, [0] * (count + 1))
            assert error_fields(replies[1][1])["C"] == "08P01", replies
    assert spent(server, "fay") == pytest.approx(0.25)


def test_a_fetch_with_a_wrong_format_count_leaves_its_cursors_rows(server):
    """A FETCH's portal has its cursor's columns: the rows it took were lost with the
    error."""
    with connect(server.pg_port, "gus", password("gus")) as sock:
        sock.sendall(msg(b"Q", b"DECLARE c CURSOR FOR SELECT day, COUNT(*) AS n FROM visits "
                                b"GROUP BY day\0"))
        until_ready(sock)
        replies = exchange(sock, "FETCH 3 FROM c", [0, 0])
        assert error_fields(replies[1][1])["C"] == "08P01"
        replies = exchange(sock, "FETCH 3 FROM c", [0, 0, 1, 1])
        assert sum(kind == b"D" for kind, _ in replies) == 3
        sock.sendall(msg(b"Q", b"FETCH ALL FROM c\0"))
        assert sum(kind == b"D" for kind, _ in until_ready(sock)) == 4
    assert spent(server, "gus") == pytest.approx(0.25)
