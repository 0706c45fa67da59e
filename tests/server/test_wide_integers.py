"""A BIGINT answer whose values pass int8 (arithmetic on aggregates: its interval's ends) is
announced as numeric where its rows come with their description, and refused, saying what
was charged, where the client read the types before the statement ran: announced as bigint,
its binary form failed after the charge as 'malformed message' (08P01, no ε said), and text
clients read a bigint that was none."""

from __future__ import annotations

import asyncio
import random
import struct
from decimal import Decimal

import psycopg
import pytest
from raw_pg import connect, msg, until_ready
from server_harness import password, serving
from test_psql import spent

import dpsql
from dpsql.server import pgtypes

ANALYSTS = ["ida", "jon", "kai", "lou"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-wide"), analysts=ANALYSTS)


def wide(tag: str) -> str:
    """A statement whose c_high (about 10⁴ × 2⁶³) passes int8; ``tag`` makes it a new one."""
    return (f"SELECT COUNT(*) * 9223372036854775807 AS c FROM visits "
            f"WHERE amount > {random.Random(tag).random() / 10:.6f}")


@pytest.mark.parametrize("binary", [True, False])
def test_psycopg_reads_a_bigint_past_int8_as_numeric(server, binary):
    user = "ida" if binary else "jon"
    with psycopg.connect(server.dsn(user), autocommit=True) as con:
        cur = con.cursor(binary=binary)
        rows = cur.execute(wide(user)).fetchall()
        types = {d.name: d.type_code for d in cur.description}
    assert types["c_high"] == pgtypes.NUMERIC
    assert isinstance(rows[0][2], Decimal) and rows[0][2] >= 2**63
    assert spent(server, user) == pytest.approx(0.25)


def oids(description: bytes) -> dict[str, int]:
    """A RowDescription's column names and type oids."""
    (count,), pos, out = struct.unpack("!H", description[:2]), 2, {}
    for _ in range(count):
        end = description.index(b"\0", pos)
        out[description[pos:end].decode()] = struct.unpack("!I", description[end + 7:end + 11])[0]
        pos = end + 19
    return out


def cells(row: bytes) -> list[bytes | None]:
    """A DataRow's values, as sent (text here)."""
    (count,), pos, out = struct.unpack("!H", row[:2]), 2, []
    for _ in range(count):
        (size,) = struct.unpack("!i", row[pos:pos + 4])
        out.append(None if size < 0 else row[pos + 4:pos + 4 + size])
        pos += 4 + max(size, 0)
    return out


def test_a_simple_query_and_a_cursors_fetch_describe_it_as_numeric(server):
    """psql's protocol: the description comes with the rows, of the same cursor's each
    time it is fetched from."""
    with connect(server.pg_port, "jon", password("jon")) as sock:
        sock.sendall(msg(b"Q", wide("simple").encode() + b"\0"))
        replies = dict(until_ready(sock))
        assert oids(replies[b"T"])["c_high"] == pgtypes.NUMERIC
        assert int(cells(replies[b"D"])[2]) >= 2**63
        sock.sendall(msg(b"Q", b"DECLARE w CURSOR FOR " + wide("cursor").encode() + b"\0"))
        until_ready(sock)
        sock.sendall(msg(b"Q", b"FETCH 1 FROM w\0"))
        assert oids(dict(until_ready(sock))[b"T"])["c_high"] == pgtypes.NUMERIC


def test_a_client_told_bigint_before_it_ran_is_refused_saying_what_was_charged(server):
    """asyncpg reads a statement's columns at Describe, before it runs, and then its rows
    without a description: their bigint cannot hold the value."""
    import asyncpg

    async def ask():
        con = await asyncpg.connect(host="127.0.0.1", port=server.pg_port, user="kai",
                                    password="kai-secret-pw", database="visits")
        try:
            with pytest.raises(asyncpg.exceptions.NumericValueOutOfRangeError) as caught:
                await con.fetch(wide("asyncpg"))
            return caught.value
        finally:
            await con.close()

    err = asyncio.run(ask())
    assert "the answer was released and ε 0.25 was charged" in err.message
    assert "holds a value past bigint, the type Describe announced" in err.message
    assert "ε charged: 0.25" in err.detail and "no cost" in err.hint
    assert spent(server, "kai") == pytest.approx(0.25)
    # as the hint says: asked again from a client that reads the types with the rows
    with psycopg.connect(server.dsn("kai"), autocommit=True) as con:
        row = con.cursor(binary=True).execute(wide("asyncpg")).fetchone()
    assert row[2] >= 2**63 and spent(server, "kai") == pytest.approx(0.25)


def test_the_dpsql_client_reads_ints_as_embedded(server):
    with dpsql.connect(server.url("lou")) as con:
        cur = con.execute(wide("client"))
        (value,) = cur.fetchone()
        low, high = cur.intervals()[["c_low", "c_high"]].iloc[0]
    assert value is None or isinstance(value, int)
    assert isinstance(high, int) and high >= 2**63 and isinstance(low, int)
    assert cur.description[0].type_code == "BIGINT"
