"""The neighbour harness checks a FILTER partition's charge (``neighbours.check_partition``).

``check_parts`` bounds each part by its own Δ, which a wrong disjointness proof keeps: in
adversary round 28w a public table of a DuckDB database file, declared without columns, kept
its stored VARCHAR COLLATE NOCASE, so FILTER (WHERE pub.name = 'p') and FILTER (WHERE
pub.name = 'P'), proven to share no row (byte-wise) and charged as one share, both counted the
added person's row; ``check_statement`` said "released". These tests hold the harness to
catching that: it must flag the statement wherever the engine moves both classes (run the
harness against the code before the fix to see it fail), and pass on the fixed engine."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb

import dpsql
from dpsql.compile import disjoint
from dpsql.release import filter_partition

NOCASE = ("SELECT COUNT(*) FILTER (WHERE pub.name = 'p') AS a, "
          "COUNT(*) FILTER (WHERE pub.name = 'P') AS b FROM t JOIN pub ON t.rid = pub.id")
META = {"name": "nocase", "budget": {"epsilon": 100, "delta": 1e-6}, "tables": {
    "t": {"privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
          "columns": {"uid": "int", "rid": "int"}},
    "pub": {"public": True}}}  # no columns declared: read as the file stores them


def nocase_pair(root: Path) -> nb.Pair:
    """D: 20 persons on public row 3 ('q'); D′: D plus person 42 on row 1 ('p'), in DuckDB
    database files whose pub.name is stored COLLATE NOCASE ('p' and 'P' are equal there)."""
    connections = []
    for side, person in (("d", []), ("d_prime", [(nb.TARGET, 1)])):
        path = root / f"{side}.duckdb"
        with duckdb.connect(str(path)) as con:
            con.execute("CREATE TABLE pub (id BIGINT, name VARCHAR COLLATE NOCASE)")
            con.execute("INSERT INTO pub VALUES (1, 'p'), (2, 'P'), (3, 'q')")
            con.execute("CREATE TABLE t (uid BIGINT, rid BIGINT)")
            con.executemany("INSERT INTO t VALUES (?, ?)", [(u, 3) for u in range(20)] + person)
        connections.append(dpsql.connect(str(path), metadata=META, insecure_seed=11,
                                         ledger=root / f"{side}.sqlite"))
    return nb.Pair(*connections, folders=(root, root))


def test_a_stored_nocase_collation_is_not_a_partition(tmp_path):
    """The statement is charged as a partition of two classes, and the person's row moves
    the count of 'p' alone (the engine compares the texts byte by byte): released."""
    pair = nocase_pair(tmp_path)
    try:
        plan = nb.plan_both(pair, NOCASE, epsilon=1)[0]
        statement = plan.release.statements[0]
        assert filter_partition(statement, plan.release.neighbouring) == ((0,), (1,))
        assert nb.check_statement(pair, NOCASE) == "released"
        assert pair.d.execute("SELECT name, COUNT(*) AS n FROM pub GROUP BY name "
                              "ORDER BY name").fetchall() == [("P", 1), ("p", 1), ("q", 1)]
    finally:
        pair.close()


def test_the_harness_catches_a_person_in_two_classes(tmp_path):
    """Were amount < 30 and amount < 60 taken apart, one person's visits of 10 would move
    both counts by their whole Δ, each within it (``check_parts`` passes), at one share:
    ``check_partition`` finds shares 1 and 1 of the sensitivities, 2 > 1."""
    base = nb.base_tables()
    extra = {"visits": pd.DataFrame({"uid": [str(nb.TARGET)] * 700, "day": ["Mon"] * 700,
                                     "amount": ["10"] * 700, "region_id": ["0"] * 700})}
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra))
    sql = ("SELECT COUNT(*) FILTER (WHERE amount < 30) AS a, "
           "COUNT(*) FILTER (WHERE amount < 60) AS b FROM visits")
    try:
        assert nb.check_statement(pair, sql) == "released"  # no partition: charged in sequence
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(disjoint.Prover, "disjoint", lambda self, x, y: True)
            with pytest.raises(AssertionError, match="more than one class"):
                nb.check_statement(pair, sql)
    finally:
        pair.close()


def test_a_person_across_classes_fills_them_by_shares(tmp_path):
    """A person whose rows lie in every class moves each by a fraction of its Δ (their rows
    in the cell are scaled to L∞ together): the partition holds, the harness passes it."""
    base = nb.base_tables()
    rows = 700
    extra = {"visits": pd.DataFrame({
        "uid": [str(nb.TARGET)] * rows, "day": [nb.DAYS[i % len(nb.DAYS)] for i in range(rows)],
        "amount": ["100"] * rows, "region_id": ["0"] * rows}, dtype=object)}
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, extra))
    try:
        for sql in (("SELECT COUNT(*) FILTER (WHERE day = 'Mon') AS mon, "
                     "COUNT(*) FILTER (WHERE day = 'Tue') AS tue, "
                     "SUM(amount) FILTER (WHERE day = 'Wed') AS wed FROM visits"),
                    ("SELECT region_id, COUNT(*) FILTER (WHERE day = 'Mon') AS mon, "
                     "AVG(amount) FILTER (WHERE day = 'Tue') AS tue FROM visits "
                     "GROUP BY region_id")):
            plan = nb.plan_both(pair, sql, epsilon=1)[0]
            assert len(filter_partition(plan.release.statements[0],
                                        plan.release.neighbouring)) >= 2, sql
            assert nb.check_statement(pair, sql) == "released", sql
    finally:
        pair.close()
