"""A private column that an INNER JOIN's ON equates to a public table's column holds that
column's values, and a public table's column holds its own values whatever bounds it declares
(``scope.public_origins``, ``scope.with_public_domain``, ``select._key_tuples``):

- GROUP BY a.ward, w.beds over admissions JOIN wards ON a.ward = w.ward (or USING (ward))
  releases the public table's 10 (ward, beds) rows, as GROUP BY w.ward, w.beds does (99
  cells before: 11 declared wards × 9 bed counts, 89 of them impossible, each noised); GROUP
  BY a.ward alone releases the 10 wards the table holds (11 before), and WHERE w.building =
  'A' keeps its 4; a LEFT JOIN keeps every declared ward, one without a public row too;
- a quantile that only feeds an expression (SUM(a.los) / MAX(w.beds)) has its rank error in
  ``cur.notes``, with the hint that GROUP BY w.beds reads the public column exactly;
- a public column declared 0 to 100 that holds 1 to 7 bounds an aggregate by 1 to 7 (the
  sensitivity of SUM(w.floor) 119 = 17 rows × 7, not 1,700), and the SQL clamps to what was
  read when the table changes after;
- the neighbour contract holds on DuckDB and PostgreSQL for a person with 700 admissions in
  declared wards without a public row, undeclared ones, NULL and '' wards and extreme stays.
"""

# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402
from test_neighbours_on_postgresql import _load  # noqa: E402

import dpsql  # noqa: E402

WARDS = ["CARD", "ONCO", "ORTH", "PEDS", "MATN", "ICU", "GENM", "SURG", "NEUR", "PSYC"]
BEDS = [40, 30, 35, 25, 30, 12, 80, 45, 20, 24]  # 9 distinct counts
DECLARED = [*WARDS, "XTRA"]  # a declared ward the public table does not hold
PATIENTS = 60
EXACT = 1e7  # ε at which a count's noise is far below 1
JOINED = "FROM admissions a JOIN wards w ON a.ward = w.ward"
BY_BEDS = f"SELECT a.ward, w.beds, COUNT(*) AS n {JOINED} GROUP BY a.ward, w.beds"
USING = "SELECT ward, beds, COUNT(*) AS n FROM admissions JOIN wards USING (ward) " \
    "GROUP BY ward, beds"
BY_WARD = f"SELECT a.ward, COUNT(*) AS n {JOINED} GROUP BY a.ward"
LEFT = "FROM admissions a LEFT JOIN wards w ON a.ward = w.ward"
OCCUPANCY = f"SELECT w.ward_name, SUM(a.los) / MAX(w.beds) AS r {JOINED} GROUP BY w.ward_name"
FLOORS = f"SELECT SUM(w.floor) AS s {JOINED}"
CONTRACT = [
    f"SELECT a.ward, w.beds, COUNT(*) AS n, SUM(a.los) AS s {JOINED} GROUP BY a.ward, w.beds",
    USING,
    f"SELECT a.ward, COUNT(*) AS n, AVG(a.los) AS m {JOINED} WHERE w.building = 'A' "
    "GROUP BY a.ward",
    f"SELECT UPPER(a.ward) AS u, w.building, COUNT(*) AS n {JOINED} GROUP BY u, w.building",
    f"SELECT a.ward, w.beds, COUNT(*) AS n {LEFT} GROUP BY a.ward, w.beds",
    f"SELECT a.ward, COUNT(*) AS n {LEFT} GROUP BY a.ward",
    OCCUPANCY,
    f"SELECT AVG(w.floor) AS f, SUM(w.floor * a.los) AS s {JOINED}",
    f"SELECT w.floor, COUNT(*) AS n {JOINED} GROUP BY w.floor",
    f"SELECT AVG(t.f) AS f FROM (SELECT a.patient_id, MAX(w.floor) AS f {JOINED} "
    "GROUP BY a.patient_id) t",
]


def hospital() -> dict[str, pd.DataFrame]:
    """D: 60 patients with 1 to 5 admissions each, in any declared ward (XTRA too), and the
    public wards (floor 1 to 7, declared 0 to 100)."""
    rng = np.random.default_rng(8)
    rows = [(p, str(rng.choice(DECLARED)), int(rng.integers(0, 53)))
            for p in range(PATIENTS) for _ in range(rng.integers(1, 6))]
    admissions = pd.DataFrame(rows, columns=["patient_id", "ward", "los"])
    wards = pd.DataFrame({"ward": WARDS, "ward_name": [w.title() for w in WARDS],
                          "building": list("ABACCABABD"), "beds": BEDS,
                          "floor": [1, 2, 3, 4, 5, 6, 7, 1, 2, 3]})
    return {"admissions": admissions, "wards": wards}


def adversary() -> dict[str, pd.DataFrame]:
    """One patient with 700 admissions: in every public ward, in XTRA (declared, no public
    row), in wards nobody declared, NULL and '', stays at and beyond the bounds."""
    wards = [*DECLARED, "ZZZ", "card", "", None]
    stays = ["52", "0", str(nb.BIG), str(nb.SMALL), None]
    return {"admissions": pd.DataFrame({
        "patient_id": [str(PATIENTS + 7)] * 700, "ward": nb._cycled(wards, 700),
        "los": nb._cycled(stays, 700)}, dtype=object)}


def metadata(folder: Path | None) -> dict:
    """Private admissions (L0 10, L∞ 17, R 17, as the tester's) and public wards; sources in
    ``folder`` (None: tables of a PostgreSQL database)."""
    meta = {"name": "hospital", "budget": {"epsilon": 1e15, "delta": 0.5}, "tables": {
        "admissions": {
            "privacy_unit": "patient_id", "max_groups_per_unit": 10, "max_rows_per_group": 17,
            "max_rows_per_unit": 17,
            "columns": {"patient_id": "int", "ward": {"type": "text", "values": DECLARED},
                        "los": {"type": "int", "lower": 0, "upper": 52}}},
        "wards": {"public": True, "columns": {
            "ward": "text", "ward_name": "text", "building": "text", "beds": "int",
            "floor": {"type": "int", "lower": 0, "upper": 100}}}}}
    if folder is not None:
        for name, table in meta["tables"].items():
            table.update(source=str(folder / f"{name}.csv"), csv={"null": nb.NULL})
    return meta


def connect(folder: Path, tables: dict[str, pd.DataFrame]) -> dpsql.Connection:
    nb.write_database(folder, tables)
    return dpsql.connect(metadata=metadata(folder), ledger=folder / "ledger.sqlite",
                         insecure_seed=11)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    folder = tmp_path_factory.mktemp("join-key-domains")
    with connect(folder, hospital()) as connection:
        yield connection, folder


def _planned(con: dpsql.Connection, sql: str):
    return con._engine.plan(sql, epsilon=1).release.statements[0].checked


def _exact(folder: Path, sql: str) -> dict:
    """``sql`` (keys, then a count) on the CSV files, by DuckDB without dpsql."""
    db = duckdb.connect()
    for name in ("admissions", "wards"):
        db.execute(f"CREATE VIEW {name} AS SELECT * FROM read_csv('{folder}/{name}.csv', "
                   f"nullstr = '{nb.NULL}')")
    return {tuple(row[:-1]): row[-1] for row in db.execute(sql).fetchall()}


@pytest.mark.parametrize("sql", [BY_BEDS, USING])
def test_a_private_key_equated_to_a_public_one_takes_the_tables_rows(con, sql):
    """99 cells before (11 declared wards × 9 bed counts); now the public table's 10 rows,
    each counted as SQL counts it."""
    con, folder = con
    checked = _planned(con, sql)
    assert checked.cells == 10
    [group] = checked.key_tuples
    assert (group.keys, set(group.rows)) == ((0, 1), set(zip(WARDS, BEDS, strict=True)))
    released = {(ward, beds): n for ward, beds, n in con.execute(sql, epsilon=EXACT).fetchall()}
    truth = _exact(folder, "SELECT a.ward, w.beds, COUNT(*) FROM admissions a JOIN wards w "
                           "ON a.ward = w.ward GROUP BY ALL")
    assert released.keys() == set(zip(WARDS, BEDS, strict=True)) == truth.keys()
    assert all(abs(released[cell] - truth[cell]) <= 1 for cell in truth)


def test_grouping_by_the_public_columns_gives_the_same_cells(con):
    con, _ = con
    public = f"SELECT w.ward, w.beds, COUNT(*) AS n {JOINED} GROUP BY w.ward, w.beds"
    assert _planned(con, public).key_tuples[0].rows == _planned(con, BY_BEDS).key_tuples[0].rows


def test_one_equated_key_takes_the_values_the_table_holds(con):
    """GROUP BY a.ward: the 10 wards of the public table (XTRA's rows join none), the
    source saying so; WHERE w.building = 'A' keeps its 4."""
    con, _ = con
    [key] = con.explain(BY_WARD)["statements"][0]["keys"]
    assert key == {"name": "ward", "domain_size": 10, "domain_source":
                   "values in the metadata, those public table wards.ward holds"}
    assert [w for w, _ in con.execute(BY_WARD, epsilon=EXACT).fetchall()] == sorted(WARDS)
    in_a = f"{BY_WARD.replace(' GROUP', ' WHERE w.building = ' + repr('A') + ' GROUP')}"
    assert _planned(con, in_a).cells == 4


def test_a_left_join_keeps_the_private_keys_that_match_nothing(con):
    """Its ON equates nothing: XTRA, which no public row holds, keeps its cell and count
    (its admissions have NULL beds), and the keys keep the product of their domains."""
    con, folder = con
    sql = f"SELECT a.ward, COUNT(*) AS n {LEFT} GROUP BY a.ward"
    assert not _planned(con, sql).key_tuples
    released = dict(con.execute(sql, epsilon=EXACT).fetchall())
    truth = _exact(folder, "SELECT ward, COUNT(*) FROM admissions GROUP BY ward")
    assert set(released) == set(DECLARED) and abs(released["XTRA"] - truth[("XTRA",)]) <= 1
    assert _planned(con, f"SELECT a.ward, w.beds, COUNT(*) AS n {LEFT} "
                         "GROUP BY a.ward, w.beds").cells == 11 * 9


def test_a_quantile_in_an_expression_says_its_rank_error(con):
    """SUM(a.los) / MAX(w.beds): MAX is a DP quantile, whose rank error no interval shows
    (the ratio has none); the note says so and how to read beds exactly."""
    con, _ = con
    cur = con.execute(OCCUPANCY, epsilon=1)
    [note] = [n for n in cur.notes if n.startswith("MAX(w.beds)")]
    assert "a DP quantile, its rank within ±" in note and "what is computed from it has none" \
        in note and "GROUP BY w.beds beside the other keys reads its value exactly" in note
    assert list(cur.intervals().columns) == ["ward_name", "r"]  # the ratio: no interval
    exact = f"SELECT w.ward_name, w.beds, SUM(a.los) AS s {JOINED} GROUP BY w.ward_name, w.beds"
    assert _planned(con, exact).cells == 10  # the hint's statement: one cell a ward


def test_declared_bounds_of_a_public_column_narrow_to_its_values(con):
    """floor is declared 0 to 100 and holds 1 to 7: a person's 17 rows add at most 119."""
    con, _ = con
    [part] = con.explain(FLOORS)["statements"][0]["aggregates"]
    assert part["sensitivity"] == 17 * 7  # 1,700 before
    keys = con.explain(f"SELECT w.floor, COUNT(*) AS n {JOINED} GROUP BY w.floor")
    assert keys["statements"][0]["keys"][0]["domain_size"] == 7  # 101 before


def test_the_sql_clamps_to_the_values_read(tmp_path):
    """The table (Parquet, read at each query) changes after its values were read: every row
    still adds at most 7."""
    tables = hospital()
    nb.write_database(tmp_path, tables)
    meta = metadata(tmp_path)
    meta["tables"]["wards"].update(source=str(tmp_path / "wards.parquet"), csv=None)
    tables["wards"].to_parquet(tmp_path / "wards.parquet")
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=11) as con:
        con.explain(FLOORS)
        tables["wards"].assign(floor=100).to_parquet(tmp_path / "wards.parquet")
        (total,) = con.execute(FLOORS, epsilon=EXACT).fetchone()
        (seen,) = con.execute(f"SELECT COUNT(*) AS n {JOINED} WHERE w.floor = 100",
                              epsilon=EXACT).fetchone()
    rows = tables["admissions"].query("ward != 'XTRA'").groupby("patient_id").size()
    assert seen > 0 and 0 < total <= rows.clip(upper=17).sum() * 7 + 1


# ---- the neighbour contract ------------------------------------------------------------------

@pytest.fixture(scope="module")
def duck_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("join-key-pair")
    base = hospital()
    pair = nb.Pair(connect(root / "d", base), connect(root / "d_prime",
                                                      nb.with_rows(base, adversary())),
                   folders=(root / "d", root / "d_prime"))
    yield pair
    pair.close()


@pytest.fixture(scope="module")
def postgres_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pg-join-key-pair")
    base = hospital()
    with databases("dpsql_join_keys") as create:
        connections = []
        for side, tables in (("d", base), ("d_prime", nb.with_rows(base, adversary()))):
            url, meta = create(), metadata(None)
            _load(url, tables, meta)
            (root / side).mkdir()
            connections.append(dpsql.connect(url, metadata=meta, insecure_seed=11,
                                             ledger=root / side / "ledger.sqlite"))
        pair = nb.Pair(*connections, folders=(root / "d", root / "d_prime"))
        yield pair
        pair.close()


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def pair(request):
    return request.getfixturevalue(f"{'duck' if request.param == 'duckdb' else 'postgres'}_pair")


def test_the_neighbour_contract_holds(pair):
    outcomes = nb.contract([pair], CONTRACT)
    assert all(o == ["released"] for o in outcomes), outcomes
