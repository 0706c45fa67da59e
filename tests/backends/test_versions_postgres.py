"""Answer reuse on PostgreSQL tables whose rows live in other tables (versions.py): a
partitioned or inherited table's version counts its partitions and children, and a table
whose rows it cannot follow is never reused."""

from __future__ import annotations

import time

import pytest
from servers import databases

import dpsql

pytestmark = pytest.mark.postgres

SQL = "SELECT COUNT(*) AS n FROM s.t"


@pytest.fixture
def database():
    """A fresh database with an empty schema ``s``, and a connection writing to it."""
    import psycopg

    with databases("dpsql_versions") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as writer:
            writer.execute("CREATE SCHEMA s")
            yield url, writer


def _ask(url: str, ledger) -> tuple[float, float]:
    """COUNT(*) of s.t at ε = 1 through a new connection, and the ε it spent."""
    meta = {"name": "versions", "budget": {"epsilon": 100, "delta": 1e-6},
            "tables": {"s.t": {"privacy_unit": "uid", "max_groups_per_unit": 1,
                               "max_rows_per_group": 1,
                               "columns": {"uid": {"type": "int"},
                                           "x": {"type": "int", "lower": 0, "upper": 1}}}}}
    with dpsql.connect(url, metadata=meta, ledger=str(ledger)) as con:
        cursor = con.execute(SQL, epsilon=1)
        return cursor.fetchall()[0][0], float(cursor.epsilon_spent)


def _settled(writer, table: str, inserted: int) -> None:
    """Wait until the statistics show ``inserted`` rows written to ``table`` (the writing
    session flushes them when idle), so that the version stays put between two asks."""
    for _ in range(100):
        writer.execute("SELECT pg_stat_clear_snapshot()")
        found = writer.execute("SELECT n_tup_ins FROM pg_stat_all_tables WHERE relid = "
                               "%s::regclass", (table,)).fetchone()[0]
        if found == inserted:
            return
        time.sleep(0.2)
    raise AssertionError(f"{table}'s statistics still show {found} rows inserted")


@pytest.mark.parametrize("child", [
    "CREATE TABLE s.c PARTITION OF s.t FOR VALUES FROM (0) TO (1000000)",
    "CREATE TABLE s.c () INHERITS (s.t)"], ids=["partition", "inherits"])
def test_rows_written_to_a_partition_or_child_are_a_new_version(database, tmp_path, child):
    """The parent's own figures did not move when 100,000 rows went into its partition (it
    has no storage) or into a child: the second ask returned the stored 1,000 at ε 0."""
    url, writer = database
    writer.execute("CREATE TABLE s.t (uid int, x int)"
                   + (" PARTITION BY RANGE (uid)" if "PARTITION" in child else ""))
    writer.execute(child)
    writer.execute("INSERT INTO s.c SELECT g, 1 FROM generate_series(1, 1000) g")
    _settled(writer, "s.c", 1000)
    ledger = tmp_path / "ledger.sqlite"
    first = _ask(url, ledger)
    assert abs(first[0] - 1000) < 100 and first[1] == 1
    assert _ask(url, ledger) == (first[0], 0)  # unchanged: reused
    writer.execute("INSERT INTO s.c SELECT g, 1 FROM generate_series(1001, 101000) g")
    count, spent = _ask(url, ledger)
    assert abs(count - 101000) < 100 and spent == 1


@pytest.mark.parametrize("setup", [
    ["CREATE TABLE s.base (uid int, x int)", "CREATE VIEW s.t AS SELECT * FROM s.base"],
    ["CREATE TABLE s.base (uid int)", "CREATE TABLE s.t (uid int, x int)",
     "ALTER TABLE s.t ENABLE ROW LEVEL SECURITY", "ALTER TABLE s.t FORCE ROW LEVEL SECURITY",
     "CREATE POLICY p ON s.t USING (uid NOT IN (SELECT uid FROM s.base))"]],
    ids=["view", "row-level-security"])
def test_a_table_reading_rows_it_cannot_version_is_never_reused(database, tmp_path, setup):
    """A view and a policy read rows whose writes the statistics of s.t and its partitions do
    not show: each ask is charged (the policy's table was reused). A foreign partition is
    refused at connect (test_postgres_warehouse_edges.py)."""
    url, writer = database
    for statement in setup:
        writer.execute(statement)
    if "s.base" in " ".join(setup):
        writer.execute("INSERT INTO s.base VALUES (5)")
    ledger = tmp_path / "ledger.sqlite"
    assert [_ask(url, ledger)[1] for _ in range(2)] == [1, 1]
