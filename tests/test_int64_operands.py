"""An int operation that ``render._fits`` proves within 64 bits is computed in 64 bits: a
database types an integer literal (PostgreSQL an INTEGER column too, and a CASE, LEAST or
NULLIF of them) in 32, so CASE WHEN x > 100 THEN 2000000000 ELSE 0 END * 2 was answered on D
and failed on D′ (charged), where one person's x = 2147483647 took the large branch
(DuckDB, PostgreSQL, Spark under ANSI); LEAST(GREATEST(x, 0), 100000) * 100000 of an INTEGER
column failed on PostgreSQL alone."""
# ruff: noqa: F811

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402

import dpsql  # noqa: E402

SCHEMA = "CREATE TABLE t (uid INTEGER, x INTEGER, s TEXT)"
D = [f"({u}, {u % 50}, '{'ab'[u % 2]}')" for u in range(40)]
PERSON = ["(99, 2147483647, 'abcdefghijklmnopqrstuvwxyz')"]
META = {"name": "t", "budget": {"epsilon": 1e15}, "tables": {"t": {
    "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
    "columns": {"uid": "int", "x": {"type": "int", "lower": 0, "upper": 52}, "s": "text"}}}}
STATEMENTS = [
    "SELECT COUNT(*) AS n FROM t WHERE CASE WHEN x > 100 THEN 2000000000 ELSE 0 END * 2 > 5",
    "SELECT SUM(CASE WHEN x > 100 THEN 2000000000 ELSE 0 END * 2) AS s FROM t",
    "SELECT COUNT(*) AS n FROM t WHERE (CASE WHEN x > 100 THEN 65535 ELSE 0 END) * "
    "(CASE WHEN x > 100 THEN 65535 ELSE 0 END) > 5",
    "SELECT COUNT(*) AS n FROM t WHERE NULLIF(CASE WHEN x > 100 THEN 2000000000 ELSE 1 END, 3) "
    "* 2 > 5",
    "SELECT COUNT(*) AS n FROM t WHERE ABS(CASE WHEN x > 100 THEN -2147483648 ELSE 0 END) > 5",
    "SELECT COUNT(*) AS n FROM t WHERE LEAST(GREATEST(x, 0), 100000) * 100000 > 5",
    "SELECT SUM(LEAST(GREATEST(x, 0), 100000) * 100000) AS s FROM t",
]


def _duckdb_pair(root: Path) -> nb.Pair:
    connections = []
    for side, rows in (("d", D), ("d_prime", D + PERSON)):
        (root / side).mkdir()
        path = root / side / "t.duckdb"
        with duckdb.connect(str(path)) as db:
            db.execute(SCHEMA)
            db.execute("INSERT INTO t VALUES " + ", ".join(rows))
        connections.append(dpsql.connect(str(path), metadata=META, insecure_seed=11,
                                         ledger=root / side / "ledger.sqlite"))
    return nb.Pair(*connections, folders=(root / "d", root / "d_prime"))


def test_duckdb(tmp_path):
    pair = _duckdb_pair(tmp_path)
    assert all(o == ["released"] for o in nb.contract([pair], STATEMENTS))


@pytest.mark.postgres
def test_postgresql(tmp_path):
    import psycopg

    with databases("dpsql_int64") as create:
        connections = []
        for side, rows in (("d", D), ("d_prime", D + PERSON)):
            url = create()
            with psycopg.connect(url, autocommit=True) as db:
                db.execute(SCHEMA)
                db.execute("INSERT INTO t VALUES " + ", ".join(rows))
            (tmp_path / side).mkdir()
            connections.append(dpsql.connect(url, metadata=META, insecure_seed=11,
                                             ledger=tmp_path / side / "ledger.sqlite"))
        pair = nb.Pair(*connections, folders=(tmp_path / "d", tmp_path / "d_prime"))
        try:
            assert all(o == ["released"] for o in nb.contract([pair], STATEMENTS))
        finally:
            pair.close()
