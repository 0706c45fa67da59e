"""Bounded snapshots: persons bounded once per table and GROUP BY, then queried many times."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from conftest import DAYS, catalogue, make_visits

import dpsql
from dpsql import snapshot
from dpsql.compile.render import dialect

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))  # the neighbour harness

from neighbours import check_parts, exact_cells

HEAVY = 10**6  # the uid of one person with 10,000 rows on every day


@pytest.fixture
def visits_dir(tmp_path):
    heavy = pd.DataFrame({"uid": HEAVY, "day": [DAYS[i % 7] for i in range(10_000)],
                          "amount": 99.0, "region_id": [i % 5 for i in range(10_000)]})
    pd.concat([make_visits(), heavy]).to_csv(tmp_path / "visits.csv", index=False)
    pd.DataFrame({"age": [30], "hours": [40], "education": ["9th"], "sex": ["Male"],
                  "salary": ["<=50K"]}).to_csv(tmp_path / "adult.csv", index=False)
    return tmp_path


def _connect(folder, bounding="snapshot", **visits):
    meta = catalogue(folder)
    meta["tables"]["visits"].update(visits)
    return dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=3, bounding=bounding)


def _exact(con, sql: str) -> dict:
    """Exact (bounded, un-noised) cells of a statement, by key."""
    query = con._engine.plan(sql, epsilon=1).release.statements[0].exact_query
    names, rows = con._engine._run_exact(query)
    return {row[0] if len(row) > 1 and names[0].startswith("__k") else (): row for row in rows}


def _snapshots(con) -> list[str]:
    return [r[0] for r in con._backend.connection.execute(
        "SELECT table_name FROM duckdb_tables() WHERE table_name LIKE '__dpsql_bounded_%'"
    ).fetchall()]


def _per_person(con, table: str, by: str) -> pd.DataFrame:
    # the snapshot holds the compiled relation's columns, under their internal names
    checked = con._engine.plan("SELECT COUNT(*) FROM visits", epsilon=1).release.statements[0]
    names = checked.checked.relation.names
    uid, key = names[("visits", "uid")], names[("visits", by)]
    return con._backend.connection.execute(
        f'SELECT {uid} AS uid, {key} AS {by}, COUNT(*) AS n FROM "{table}" GROUP BY ALL').df()


@pytest.mark.parametrize("bounds", [{}, {"max_rows_per_unit": 3}, {"max_groups_per_unit": 1}])
def test_snapshot_keeps_each_person_within_the_declared_bounds(visits_dir, bounds):
    with _connect(visits_dir, **bounds) as con:
        con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", epsilon=1)
        (table,) = _snapshots(con)
        pairs = _per_person(con, table, "day")
        spec = con.catalog.tables["visits"]
        assert pairs.n.max() <= spec.max_rows_per_group
        assert pairs.groupby("uid").day.nunique().max() <= spec.max_groups_per_unit
        assert pairs.groupby("uid").n.sum().max() <= (spec.max_rows_per_unit or 10**9)
        # the heavy person is bounded, not dropped
        assert pairs[pairs.uid == HEAVY].n.sum() == min(
            spec.max_groups_per_unit * spec.max_rows_per_group, spec.max_rows_per_unit or 10**9)


def test_a_statement_without_group_by_keeps_l_infinity_rows_per_person(visits_dir):
    with _connect(visits_dir) as con:
        exact = _exact(con, "SELECT COUNT(*) AS n FROM visits")
        (table,) = _snapshots(con)
        assert _per_person(con, table, "day").groupby("uid").n.sum().max() == 2
        people = make_visits().groupby("uid").size().clip(upper=2).sum() + 2
        assert exact[()][0] == people


def test_without_where_the_snapshot_counts_what_per_query_bounding_counts(visits_dir):
    # with L0 = 7 every person keeps all their days, so no random choice separates the modes
    sql = "SELECT day, COUNT(*) AS n, COUNT(amount) AS m FROM visits GROUP BY day"
    with _connect(visits_dir, max_groups_per_unit=7) as snap, \
            _connect(visits_dir, "per_query", max_groups_per_unit=7) as per_query:
        assert _exact(snap, sql) == _exact(per_query, sql)


def test_the_snapshot_is_made_once_and_shared_by_statements_with_the_same_keys(visits_dir):
    with _connect(visits_dir) as con:
        con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", epsilon=1)
        (table,) = _snapshots(con)
        before = _per_person(con, table, "day").sort_values(["uid", "day"]).reset_index(drop=True)
        con.execute("SELECT day, SUM(amount) AS s FROM visits WHERE amount > 10 GROUP BY day",
                    epsilon=1)
        assert _snapshots(con) == [table]
        after = _per_person(con, table, "day").sort_values(["uid", "day"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(before, after)
        con.execute("SELECT region_id, COUNT(*) AS n FROM visits GROUP BY region_id", epsilon=1)
        assert len(_snapshots(con)) == 2  # other keys choose other groups


def test_where_filters_the_snapshot_rows_after_bounding(visits_dir):
    """The documented difference: a person's groups are chosen before the WHERE (but for a
    WHERE on a key alone, which narrows the domain the snapshot keeps, as the last case)."""
    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE uid = {uid} GROUP BY day"
    with _connect(visits_dir, max_groups_per_unit=1) as snap, \
            _connect(visits_dir, "per_query", max_groups_per_unit=1) as per_query:
        snap.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", epsilon=1)
        (table,) = _snapshots(snap)
        chosen = _per_person(snap, table, "day").set_index("uid").day[HEAVY]
        other = next(d for d in DAYS if d != chosen)
        where = f"{HEAVY} AND (day <> '{chosen}' OR region_id > 100)"  # not the key alone
        assert sum(r[1] for r in _exact(snap, sql.format(uid=where)).values()) == 0
        assert sum(r[1] for r in _exact(per_query, sql.format(uid=where)).values()) == 2
        where = f"{HEAVY} AND day <> '{chosen}'"  # six days: a snapshot of their rows
        assert sum(r[1] for r in _exact(snap, sql.format(uid=where)).values()) == 2
        assert len(_snapshots(snap)) == 2
        # a WHERE that leaves one day (L0 cells) needs no choice: a snapshot made without one
        where = f"{HEAVY} AND day = '{other}'"
        assert _exact(snap, sql.format(uid=where))[other][1] == 2
        assert len(_snapshots(snap)) == 3


def test_statements_that_count_persons_are_bounded_per_query(visits_dir):
    with _connect(visits_dir) as con:
        plan = con.explain("SELECT day, COUNT(DISTINCT uid) AS p FROM visits GROUP BY day; "
                           "SELECT day, COUNT(*) AS n FROM visits GROUP BY day; "
                           "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex")
        assert [s["bounding"] for s in plan["statements"]] == ["per_query", "snapshot", "rows"]
        assert plan["statements"][1]["snapshot"].startswith("CREATE TEMP TABLE IF NOT EXISTS")
        assert not _snapshots(con)  # explain runs nothing


def test_snapshot_answers_carry_the_per_query_sensitivity(visits_dir):
    sql = "SELECT day, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY day"
    with _connect(visits_dir) as snap, _connect(visits_dir, "per_query") as per_query:
        assert snap.explain(sql)["total_sensitivity"] == \
            per_query.explain(sql)["total_sensitivity"]
        cursor = snap.execute(sql, epsilon=1)
        assert [r[0] for r in cursor.fetchall()] == sorted(DAYS)


def test_an_unknown_bounding_mode_is_refused_with_the_choices(visits_dir):
    with pytest.raises(dpsql.ProgrammingError, match="per_query, snapshot"):
        _connect(visits_dir, bounding="cached")


def _every_day(folder: Path, people: list[int]) -> Path:
    """visits with one row on each day for each of ``people``."""
    folder.mkdir()
    pd.DataFrame({"uid": [u for u in people for _ in DAYS], "day": DAYS * len(people),
                  "amount": 1.0, "region_id": 0}).to_csv(folder / "visits.csv", index=False)
    pd.DataFrame({"age": [30], "hours": [40], "education": ["9th"], "sex": ["Male"],
                  "salary": ["<=50K"]}).to_csv(folder / "adult.csv", index=False)
    return folder


@pytest.mark.parametrize("first", [
    "SELECT day, COUNT(*) AS n FROM visits WHERE day = 'Mon' GROUP BY day",
    "SELECT day, SUM(amount) AS s FROM visits WHERE day IN ('Mon', 'Tue') GROUP BY day"])
def test_a_snapshot_made_without_l0_for_a_narrowing_where_is_not_read_by_the_whole_domain(
        tmp_path, first):
    """A WHERE that narrows the days to at most L0 skips the L0 pass: that snapshot once had
    the whole domain's name, and the whole domain then read 7 groups a person with L0 = 2."""
    sql = "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY day"
    people = list(range(10))
    sides = []
    for name, persons in (("d", people), ("d_prime", [*people, 42])):
        with _connect(_every_day(tmp_path / name, persons), max_groups_per_unit=2,
                      max_rows_per_group=1) as con:
            con.execute(first, epsilon=1)
            statement = con._engine.plan(sql, epsilon=1).release.statements[0]
            cells = exact_cells(con, statement)
            sides.append((statement, cells))
            count = next(p.column for p in statement.parts if p.role == "count")
            assert sum(cells[0][count].values()) == 2 * len(persons)  # L0 days a person
            assert len(_snapshots(con)) == 2
    (statement, on_d), (_, on_d_prime) = sides
    check_parts(statement, on_d, on_d_prime, sql)


def test_the_name_changes_with_everything_that_shapes_the_rows_but_the_salt(visits_dir):
    with _connect(visits_dir, max_groups_per_unit=2) as con:
        sql = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"
        checked = con._engine.plan(sql, epsilon=1).release.statements[0].checked
    capped = replace(checked, table=replace(checked.table, max_rows_per_unit=3))

    def name(cells=7, salt=1, query=checked, relation="visits"):
        return snapshot.snapshot(query, cells, salt, dialect("duckdb"), relation, [])[0]

    assert name(salt=2) == name()  # the first statement's salt serves the others
    assert len({name(), name(cells=2), name(query=capped), name(relation="other")}) == 4


def test_rows_outside_the_public_domain_take_none_of_a_persons_snapshot_groups(tmp_path):
    """Each of 400 persons has a row on each day; with Mon and Tue the domain and L0 = 1 each
    keeps one of their Mon and Tue rows in the snapshot (rewrite.domain_filters). Chosen among
    all seven days, a person kept one with probability 2/7 (about 114 of 400)."""
    pd.DataFrame([(uid, day, 0, 10.0) for uid in range(400) for day in DAYS],
                 columns=["uid", "day", "region_id", "amount"]).to_csv(
        tmp_path / "visits.csv", index=False)
    meta = catalogue(tmp_path)
    del meta["tables"]["adult"]
    table = meta["tables"]["visits"]
    table["max_groups_per_unit"], table["max_rows_per_group"] = 1, 1
    table["columns"]["day"]["values"] = ["Mon", "Tue"]
    with dpsql.connect(metadata=meta, ledger=":memory:", bounding="snapshot") as con:
        exact = _exact(con, "SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
        assert len(_snapshots(con)) == 1
        (table_name,) = _snapshots(con)
        assert con._backend.connection.execute(
            f'SELECT COUNT(*) FROM "{table_name}"').fetchone()[0] == 400
    assert sum(row[1] for row in exact.values()) == 400


def test_a_snapshots_answer_is_not_reused_by_per_query_bounding(visits_dir, tmp_path):
    """A snapshot bounds each person's rows before the WHERE, per-query bounding after it:
    they measure other quantities, and the second mode returned the first's stored answer at
    ε 0 (adversary round 29i)."""
    meta = catalogue(visits_dir)
    sql = "SELECT day, COUNT(*) AS n FROM visits WHERE amount > 90 GROUP BY day"
    for bounding in ("snapshot", "per_query"):
        with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite",
                           bounding=bounding) as con:
            cursor = con.execute(sql, epsilon=1)
            assert cursor.epsilon_spent == 1, bounding
