"""PostgreSQL databases in other encodings than UTF8.

dpsql reads and writes text as UTF-8 (``SET client_encoding``), which the server converts to
and from its own encoding. A LATIN1 database's statement holding a character LATIN1 lacks
failed inside psycopg with a bare UnicodeEncodeError, after the charge. A SQL_ASCII
database, whose text the server never converts, is refused at connect: psycopg handed its
text back as bytes and every private statement failed (KeyError b'people').
"""

from __future__ import annotations

import psycopg
import pytest
from servers import databases

import dpsql

META = {"name": "encodings", "budget": {"epsilon": 100}, "tables": {"people": {
    "privacy_unit": "pid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"pid": "int", "city": {"type": "text", "values": ["Zürich", "Genève", "Oslo"]}}}}}


def _database(create, encoding: str) -> str:
    url = create()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name}")
        admin.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' TEMPLATE template0 "
                      "LC_COLLATE 'C' LC_CTYPE 'C'")
    with psycopg.connect(url, autocommit=True) as con:
        con.execute("SET client_encoding = 'UTF8'")
        con.execute("CREATE TABLE people (pid bigint, city text)")
        con.execute("INSERT INTO people SELECT i, (ARRAY['Zürich', 'Genève', 'Oslo'])[i % 3 + 1] "
                    "FROM generate_series(1, 300) AS i")
    return url


def test_a_latin1_database_is_read_and_written_as_utf8():
    with databases("dpsql_latin1") as create:
        url = _database(create, "LATIN1")
        with dpsql.connect(url, metadata=META, ledger=":memory:", insecure_seed=1) as con:
            rows = con.execute("SELECT city, COUNT(*) AS n FROM people GROUP BY city",
                               epsilon=10).fetchall()
            assert sorted(city for city, _ in rows) == ["Genève", "Oslo", "Zürich"]
            assert all(abs(n - 100) < 30 for _, n in rows)
            # '€' has no LATIN1 byte: the server says so, and dpsql's error is a coded one
            with pytest.raises(dpsql.Error):
                con.execute("SELECT COUNT(*) AS n FROM people WHERE city = '€'", epsilon=1)


def test_a_sql_ascii_database_is_refused_at_connect():
    with databases("dpsql_ascii") as create:
        url = _database(create, "SQL_ASCII")
        with pytest.raises(dpsql.DataError, match="SQL_ASCII") as refused:
            dpsql.connect(url, metadata=META, ledger=":memory:")
        assert "ENCODING 'UTF8'" in refused.value.hint
