"""An int answer whose value or interval end passes int8 (arithmetic on aggregates) is NULL
with no interval (release: an interval follows its value), so every client reads it as the
bigint announced, whenever it reads the types: announced as bigint before, its binary form
failed after the charge as 'malformed message' (08P01, no ε said), then it was announced as
numeric with 300-digit ends where the embedded answer's value was NULL."""

from __future__ import annotations

import asyncio
import random

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
    """A statement whose value (about 10⁴ × 2⁶³) passes int8; ``tag`` makes it a new one."""
    return (f"SELECT COUNT(*) * 9223372036854775807 AS c FROM visits "
            f"WHERE amount > {random.Random(tag).random() / 10:.6f}")


@pytest.mark.parametrize("binary", [True, False])
def test_psycopg_reads_the_value_past_int8_as_null_bigint(server, binary):
    user = "ida" if binary else "jon"
    with psycopg.connect(server.dsn(user), autocommit=True) as con:
        cur = con.cursor(binary=binary)
        rows = cur.execute(wide(user)).fetchall()
        types = {d.name: d.type_code for d in cur.description}
    assert types["c"] == types["c_high"] == pgtypes.INT8
    assert rows == [(None, None, None)]
    assert spent(server, user) == pytest.approx(0.25)


def test_a_simple_query_and_a_client_told_the_types_first_read_it_alike(server):
    """psql's protocol (the description with the rows), and asyncpg's, which reads the
    columns at Describe, before the statement runs: answered alike, charged once each."""
    import asyncpg

    with connect(server.pg_port, "jon", password("jon")) as sock:
        sock.sendall(msg(b"Q", wide("simple").encode() + b"\0"))
        assert b"E" not in dict(until_ready(sock))

    async def ask():
        con = await asyncpg.connect(host="127.0.0.1", port=server.pg_port, user="kai",
                                    password="kai-secret-pw", database="visits")
        try:
            return await con.fetch(wide("asyncpg"))
        finally:
            await con.close()

    (row,) = asyncio.run(ask())
    assert tuple(row) == (None, None, None) and spent(server, "kai") == pytest.approx(0.25)


def test_the_dpsql_client_reads_it_as_embedded(server):
    with dpsql.connect(server.url("lou")) as con:
        cur = con.execute(wide("client"))
        assert cur.fetchone() == (None,)
        assert cur.intervals()[["c_low", "c_high"]].isna().all(axis=None)
        assert any("passes what its type holds" in note for note in cur.notes)
    assert cur.description[0].type_code == "BIGINT"
