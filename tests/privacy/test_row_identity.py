"""A row-privacy table joined to a public one: each row is its own synthetic person, and its
keyed-hash choice of one group (L0 = 1) must depend on that row alone. The person was the
row's position (ROW_NUMBER() OVER (), Spark's monotonically_increasing_id()), so one row
inserted before the others renumbered every later row and moved their choices (adversary
round 29k: a count moved by 9 at sensitivity 1 on DuckDB, 5 on PostgreSQL, 17 on Spark; a
SUM by 662 at 90). The harness appends its adversary last, where no position shifts: these
pairs put the added row first, in the middle and last. The person is now the row's values
and its rank among equal rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz
sys.path.insert(0, str(Path(__file__).parents[1] / "backends"))

import neighbours as nb  # noqa: E402
from servers import spark  # noqa: E402, F401 (a fixture)

STATEMENTS = [
    "SELECT r.name, COUNT(*) AS n FROM adult a JOIN regions r ON a.hours > r.region_id * 20 "
    "GROUP BY r.name",
    "SELECT r.name, SUM(a.age) AS s, AVG(a.age) AS m FROM adult a "
    "JOIN regions r ON a.hours > r.region_id * 20 GROUP BY r.name",
    "SELECT r.name, COUNT(DISTINCT a.education) AS e FROM adult a "
    "JOIN regions r ON a.hours > r.region_id * 20 GROUP BY r.name",
]
# one ordinary row, and one equal to a row of D: its rank among equal rows is what tells
# them apart
ROWS = {"new": {"age": "40", "hours": "40", "education": "Bachelors", "sex": "Male",
                "salary": ">50K"}, "copy": None}


def _inserted(base: dict, row: dict | None, place: str) -> dict:
    adult = base["adult"].astype(object)
    added = adult.iloc[[5]] if row is None else pd.DataFrame([row], dtype=object)
    at = {"first": 0, "middle": len(adult) // 2, "last": len(adult)}[place]
    return dict(base, adult=pd.concat([adult.iloc[:at], added, adult.iloc[at:]],
                                      ignore_index=True))


@pytest.mark.parametrize("place", ["first", "middle", "last"])
@pytest.mark.parametrize("row", sorted(ROWS))
def test_a_row_inserted_anywhere_moves_no_other_rows_choice(tmp_path, row, place):
    _released(tmp_path, _inserted(nb.base_tables(), ROWS[row], place))


@pytest.mark.spark
def test_a_row_inserted_first_moves_no_other_rows_choice_on_spark(tmp_path, spark):  # noqa: F811
    _released(tmp_path, _inserted(nb.base_tables(), ROWS["new"], "first"), spark)


def _released(tmp_path, d_prime: dict, target=None) -> None:
    pair = nb.open_pair(tmp_path, nb.base_tables(), d_prime, target=target)
    try:
        for sql in STATEMENTS:
            assert nb.check_statement(pair, sql) == "released", sql
    finally:
        pair.close()


@pytest.mark.spark
def test_rows_a_microsecond_apart_are_two_rows_on_spark(tmp_path, spark):  # noqa: F811
    """Spark's to_json spelt a timestamp to the millisecond: rows 1 µs apart were one text,
    told apart by their position, and a row inserted first moved the others' choices
    (rounds 29m, 29n: a count moved by 28 at sensitivity 1)."""
    import datetime

    import pyarrow as pa
    import pyarrow.parquet as pq

    import dpsql

    start = datetime.datetime(2024, 1, 1)
    stamps = [start + datetime.timedelta(microseconds=i) for i in range(1, 201)]
    odd = ", ".join(f"TIMESTAMP '{t:%Y-%m-%d %H:%M:%S.%f}'" for t in stamps[::2])
    sql = (f"SELECT r.name, COUNT(*) AS n FROM stamps s JOIN regions r ON s.v >= r.region_id "
           f"WHERE s.ts IN ({odd}) GROUP BY r.name")
    regions = pa.table({"region_id": pa.array([1, 2, 3], pa.int64()),
                        "name": ["North", "South", "East"]})
    cells = []
    for side, first in (("d", []), ("d_prime", [start])):
        times = first + stamps
        pq.write_table(pa.table({"ts": pa.array(times, pa.timestamp("us")),
                                 "v": pa.array([3] * len(times), pa.int64())}),
                       tmp_path / f"{side}.parquet")
        pq.write_table(regions, tmp_path / "regions.parquet")
        meta = {"name": "s", "budget": 100, "tables": {
            "stamps": {"source": str(tmp_path / f"{side}.parquet"), "privacy_unit": None,
                       "columns": {"ts": "timestamp", "v": "int"}},
            "regions": {"source": str(tmp_path / "regions.parquet"), "public": True,
                        "columns": {"region_id": "int", "name": "text"}}}}
        with dpsql.connect(spark, metadata=meta, ledger=":memory:", insecure_seed=2) as con:
            statement = con._engine.plan(sql, epsilon=1).release.statements[0]
            cells.append(sorted(con._engine._run_exact(statement.exact_query)[1]))
    assert cells[0] == cells[1]
