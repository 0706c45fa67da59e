"""PostgreSQL databases in other encodings than UTF8 are refused at connect.

Converted to UTF-8 for dpsql, one person's text valid in the database's encoding could have no
Unicode character (WIN1252's 0x81, EUC_JP's f5a1): a private key's text read back failed the
answer on D′ alone, after the charge (adversary round Q). EUC_JP stores ¦ and ￤ alike, so two
declared values were one group on the server and two in the domain. In LATIN1 a declared '€'
failed every statement naming it, after the charge (a bare UnicodeEncodeError from psycopg);
SQL_ASCII text came back as bytes (KeyError b'people' on every private statement); Python has
no codec of MULE_INTERNAL (a BackendError naming the codec).
"""

from __future__ import annotations

import psycopg
import pytest
from servers import databases

import dpsql

pytestmark = pytest.mark.postgres

META = {"name": "encodings", "budget": {"epsilon": 100}, "tables": {"people": {
    "privacy_unit": "pid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"pid": "int", "city": {"type": "text", "values": ["Oslo", "Bern"]}}}}}


def _database(create, encoding: str) -> str:
    url = create()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE {name}")
        admin.execute(f"CREATE DATABASE {name} ENCODING '{encoding}' TEMPLATE template0 "
                      "LC_COLLATE 'C' LC_CTYPE 'C'")
    with psycopg.connect(url, autocommit=True, client_encoding="sql_ascii") as con:
        con.execute("CREATE TABLE people (pid bigint, city text)")
        con.execute("INSERT INTO people SELECT i, (ARRAY['Oslo', 'Bern'])[i % 2 + 1] "
                    "FROM generate_series(1, 300) AS i")
    return url


@pytest.mark.parametrize("encoding", ["LATIN1", "WIN1252", "EUC_JP", "SQL_ASCII"])
def test_a_database_not_in_utf8_is_refused_at_connect(encoding):
    with databases("dpsql_encoding") as create:
        url = _database(create, encoding)
        with pytest.raises(dpsql.DataError, match=f"encoding is {encoding}") as refused:
            dpsql.connect(url, metadata=META, ledger=":memory:")
        assert "ENCODING 'UTF8'" in refused.value.hint


def test_a_database_without_a_utf8_conversion_is_refused_by_the_server():
    with databases("dpsql_encoding") as create:
        url = _database(create, "MULE_INTERNAL")
        with pytest.raises(dpsql.BackendError, match="UTF8 and MULE_INTERNAL"):
            dpsql.connect(url, metadata=META, ledger=":memory:")


def test_a_utf8_database_is_read():
    with databases("dpsql_encoding") as create:
        url = _database(create, "UTF8")
        with dpsql.connect(url, metadata=META, ledger=":memory:", insecure_seed=1) as con:
            rows = dict(con.execute("SELECT city, COUNT(*) AS n FROM people GROUP BY city",
                                    epsilon=10).fetchall())
    assert set(rows) == {"Oslo", "Bern"} and all(abs(n - 150) < 30 for n in rows.values())
