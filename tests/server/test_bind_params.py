"""Parameters as PostgreSQL drivers send them by default: psycopg 3's binary ``%s`` values and
asyncpg's, encoded as the types Describe reports, against a real ``dpsql serve``."""

from __future__ import annotations

import asyncio
import struct
import uuid
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import psycopg
import pytest
from server_harness import password, serving
from test_psql import spent

ANALYSTS = ["pia", "quo", "rex"]
ROUND_TRIP = "SELECT %s AS v FROM regions LIMIT 1"  # a public table: nothing is spent


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-params"), analysts=ANALYSTS)


@pytest.mark.parametrize("value, expected", [
    (datetime(2024, 1, 5, 1, 2, 3, 500000), None), (date(2024, 1, 5), None),
    (date(1, 1, 1), None), (datetime(9999, 12, 31, 23, 59, 59, 999999), None),
    # a timestamptz is its UTC wall clock, as dpsql reads timestamps
    (datetime(2024, 1, 5, 3, tzinfo=timezone(timedelta(hours=2))), datetime(2024, 1, 5, 1)),
    (7, None), (-40_000, None), (2**40, None), (2.5, None), (True, None), ("ü'x", None),
    (Decimal("1.25"), 1.25), (2**70, float(2**70)),  # numeric: exact as bound, a DOUBLE back
    (uuid.UUID(int=5), "00000000-0000-0000-0000-000000000005"), (None, None)])
def test_psycopg_binary_parameters_are_bound(server, value, expected):
    # psycopg sends datetimes, dates, ints past 64 bits and uuids in binary with %s: each was
    # refused ("binary parameters of type oid 1114 are not supported")
    with psycopg.connect(server.dsn("pia"), autocommit=True) as con:
        row = con.execute(ROUND_TRIP, [value]).fetchone()
    assert row == (value if expected is None else expected,)


def test_binary_parameters_in_a_release_and_refused_types(server):
    with psycopg.connect(server.dsn("quo"), autocommit=True) as con:
        n, low, high = con.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = %s "
                                   "AND amount < %s", [2, Decimal("50.5")]).fetchone()
        assert low <= n <= high
        for value in (timedelta(days=3), b"xy", datetime(2024, 1, 5).time()):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="cannot bind"):
                con.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id < %s", [value])
    assert spent(server, "quo") == pytest.approx(0.25)


def test_asyncpg_reads_parameter_types_as_postgresql_infers_them(server):
    # every parameter was described as text: asyncpg refused to send a datetime or an int
    # ("expected str, got datetime")
    async def run():
        import asyncpg

        con = await asyncpg.connect(host="127.0.0.1", port=server.pg_port, user="rex",
                                    password=password("rex"), database="visits")
        try:
            described = await con.prepare("SELECT COUNT(*) AS n FROM visits WHERE "
                                          "region_id = $2 AND $1 < amount AND day IN ($3)")
            stamp = await con.fetchval("SELECT $1::timestamp AS v FROM regions LIMIT 1",
                                       datetime(2024, 1, 5, 1, 2, 3, 500000))
            day = await con.fetchval("SELECT CAST($1 AS date) AS v FROM regions LIMIT 1",
                                     date(2024, 1, 5))
            text = await con.fetchval("SELECT $1 AS v FROM regions LIMIT 1", "x")
            row = await con.fetchrow("SELECT COUNT(*) AS n FROM visits WHERE region_id = $1",
                                     2)
            return [t.name for t in described.get_parameters()], stamp, day, text, row
        finally:
            await con.close()

    types, stamp, day, text, row = asyncio.run(run())
    assert types == ["float8", "int8", "text"]
    assert (stamp, day, text) == (datetime(2024, 1, 5, 1, 2, 3, 500000), date(2024, 1, 5), "x")
    assert row["n_low"] <= row["n"] <= row["n_high"]
    assert spent(server, "rex") == pytest.approx(0.25)


def test_a_numeric_parameters_text_is_read_exactly_and_bad_text_is_named(server):
    """A numeric's text form was read through float() (its binary form exactly), and text
    that is no number was a protocol violation (08P01) naming Python's int() or float()."""
    from raw_pg import bind, connect, error_fields, execute, msg, until_ready

    from dpsql.server import pgparams, pgtypes

    assert pgparams.value(b"12345678901234567890.5", 0, pgtypes.NUMERIC) == \
        Decimal("12345678901234567890.5")
    sock = connect(server.pg_port, "pia", password("pia"))
    try:
        for oid, text, name in ((pgtypes.NUMERIC, "abc", "numeric"),
                                (pgtypes.INT8, "1.5", "bigint"),
                                (pgtypes.FLOAT8, "x", "double precision")):
            typed = msg(b"P", b"\0SELECT COUNT(*) AS n FROM regions WHERE region_id < $1\0" +
                        struct.pack("!HI", 1, oid))
            sock.sendall(typed + bind("", "", [text.encode()]) + execute("") + msg(b"S"))
            (error,) = [error_fields(data) for kind, data in until_ready(sock) if kind == b"E"]
            assert (error["C"], error["M"]) == (
                "22023", f"invalid input syntax for type {name}: '{text}'"), error
    finally:
        sock.close()
