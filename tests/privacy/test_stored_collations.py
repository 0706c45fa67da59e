"""Texts compared byte by byte wherever dpsql reasons about them (adversary round 28w). A
public table of a DuckDB database file that declared no columns was read as SELECT *, keeping
its stored collation (NOCASE): FILTER (WHERE name = 'p') and FILTER (WHERE name = 'P'), proven
disjoint and charged as one share, both counted one person's row. A text column's values
declared as 1 and "1" (YAML reads 1 unquoted as an int) were two cells of one SQL literal, one
person's rows counted and released in both; a NUL or a lone surrogate failed after the
charge."""

from __future__ import annotations

import datetime

import duckdb
import pytest

import dpsql

SQL = ("SELECT COUNT(*) FILTER (WHERE pub.name = 'p') AS a, "
       "COUNT(*) FILTER (WHERE pub.name = 'P') AS b FROM t JOIN pub ON t.rid = pub.id")
META = {"name": "nocase", "budget": {"epsilon": 100}, "tables": {
    "t": {"privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
          "columns": {"uid": "int", "rid": "int"}},
    "pub": {"public": True}}}


def test_an_undeclared_public_tables_texts_are_compared_byte_by_byte(tmp_path):
    """The person's row (rid 1, name 'p') moves the count of 'p' alone."""
    exact = []
    for side, person in (("d", []), ("d_prime", [(42, 1)])):
        path = tmp_path / f"{side}.duckdb"
        with duckdb.connect(str(path)) as con:
            con.execute("CREATE TABLE pub (id BIGINT, name VARCHAR COLLATE NOCASE)")
            con.execute("INSERT INTO pub VALUES (1, 'p'), (2, 'P'), (3, 'q')")
            con.execute("CREATE TABLE t (uid BIGINT, rid BIGINT)")
            con.executemany("INSERT INTO t VALUES (?, ?)", [(u, 3) for u in range(20)] + person)
        with dpsql.connect(str(path), metadata=META, ledger=":memory:") as con:
            statement = con._engine.plan(SQL, epsilon=1).release.statements[0]
            names, rows = con._engine._run_exact(statement.exact_query)
            exact.append(dict(zip(names, rows[0], strict=True)))
            groups = con.execute("SELECT name, COUNT(*) AS n FROM pub GROUP BY name "
                                 "ORDER BY name").fetchall()
            assert groups == [("P", 1), ("p", 1), ("q", 1)]
    moved = [name for name in exact[0] if exact[0][name] != exact[1][name]]
    assert len(moved) == 1, exact


@pytest.mark.parametrize("values", [[1, 2, "1"], [True, "true"], ["a\x00"], ["\ud800"],
                                    ["2024-01-01", datetime.date(2024, 1, 1)]])
def test_a_text_domain_holds_texts(values):
    meta = {"name": "v", "tables": {"t": {"privacy_unit": "uid", "columns": {
        "uid": "int", "code": {"type": "text", "values": values}}}}}
    with pytest.raises(dpsql.CatalogError, match="text column"):
        dpsql.catalog.load_catalog(meta)
