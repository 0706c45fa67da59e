"""Predicates mean what the analyst's dialect says: each filtered count (at an ε so large that
the noise is 0) equals DuckDB's own count of the same predicate on the same rows, and a part
of an expression dpsql does not read is refused by name, never dropped."""

from __future__ import annotations

import duckdb
import pandas as pd
import pytest
from conftest import catalogue, write_adult_with_nulls

import dpsql

# (predicate as the analyst writes it, in DuckDB's own words for the exact count)
PREDICATES = [
    ("age IS NOT NULL", "age IS NOT NULL"),
    ("education NOT LIKE 'B%'", "education NOT LIKE 'B%'"),
    ("education NOT ILIKE 'b%'", "education NOT ILIKE 'b%'"),
    ("age BETWEEN SYMMETRIC 60 AND 30", "age BETWEEN 30 AND 60"),
    ("age NOT BETWEEN SYMMETRIC 60 AND 30", "NOT (age BETWEEN 30 AND 60)"),
    ("CONCAT(sex, NULL) = sex", "sex IS NOT NULL"),
    ("sex || NULL IS NULL", "TRUE"),
    ("LEFT(education, 2) = 'Ba'", "education LIKE 'Ba%'"),
    ("RIGHT(education, 2) = 'th'", "education LIKE '%th'"),
    ("REPLACE(education, '-', '') = 'HSgrad'", "education = 'HS-grad'"),
    ("POSITION('th' IN education) = 2", "strpos(education, 'th') = 2"),
    ("SQRT(age) > 6 AND LN(age) < 4", "age > 36 AND age < 54.598150033144236"),
    ("LOG10(age) >= 1.5 AND LOG(2, age) < 6", "age >= 31.622776601683793 AND age < 64"),
    ("POWER(age, 2) > 2500 AND EXP(age / 10) < 1000", "age > 50 AND age < 69.07755278982137"),
]


@pytest.fixture
def adult_with_nulls(tmp_path):
    return write_adult_with_nulls(tmp_path)


@pytest.mark.parametrize("dialect", ["duckdb", "postgres"])
@pytest.mark.parametrize("predicate,duck", PREDICATES)
def test_a_filtered_count_is_duckdbs_count(adult_with_nulls, dialect, predicate, duck):
    exact = duckdb.sql(f"SELECT COUNT(*) FROM read_csv_auto('{adult_with_nulls}/adult.csv') "
                       f"WHERE {duck}").fetchall()[0][0]
    with dpsql.connect(metadata=catalogue(adult_with_nulls, budget=1e12), ledger=":memory:",
                       insecure_seed=1, dialect=dialect) as con:
        sql = f"SELECT COUNT(*) AS n FROM adult WHERE {predicate}"
        assert con.execute(sql, epsilon=1e9).fetchone()[0] == exact


@pytest.mark.parametrize("dialect,sql,unread", [
    ("duckdb", "SELECT COUNT(*) AS n FROM adult WHERE ROUND(age, 0, 'truncate') > 3",
     "truncate"),
    ("spark", "SELECT COUNT(*) AS n FROM adult WHERE to_date(sex, 'yyyy') IS NULL", "format"),
])
def test_a_part_dpsql_does_not_read_is_refused(adult_with_nulls, dialect, sql, unread):
    """ROUND's third argument and to_date's format were dropped from what ran."""
    with dpsql.connect(metadata=catalogue(adult_with_nulls), ledger=":memory:",
                       dialect=dialect) as con:
        with pytest.raises(dpsql.UnsupportedSQLError, match=f"does not read its .*{unread}"):
            con.execute(sql, epsilon=1)
        assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize("sql,unread", [
    ("SELECT MAX(age, 3) AS m FROM adult", "count"),  # DuckDB: the three largest
    ("SELECT COUNT(age, hours) AS n FROM adult", "expressions"),
])
def test_an_aggregate_argument_dpsql_does_not_read_is_refused(adult_with_nulls, sql, unread):
    with dpsql.connect(metadata=catalogue(adult_with_nulls), ledger=":memory:") as con:
        with pytest.raises(dpsql.UnsupportedSQLError, match=f"does not read its {unread}"):
            con.execute(sql, epsilon=1)


# (dialect, the analyst's Sunday test in it); DuckDB numbers Sunday 0
WEEKDAYS = [("duckdb", "DAYOFWEEK(d) = 0"), ("postgres", "EXTRACT(DOW FROM d) = 0"),
            ("snowflake", "DAYOFWEEK(d) = 0"), ("mysql", "DAYOFWEEK(d) = 1"),
            ("bigquery", "EXTRACT(DAYOFWEEK FROM d) = 1"), ("spark", "DAYOFWEEK(d) = 1"),
            ("spark", "EXTRACT(DOW FROM d) = 1"), ("databricks", "DAYOFWEEK(d) = 1"),
            ("spark", "DATE_PART('dow', d) = 1"), ("databricks", "DATE_PART('dow', d) = 1"),
            ("tsql", "DATEPART(weekday, d) = 1"), ("trino", "DAY_OF_WEEK(d) = 7"),
            ("duckdb", "ISODOW(d) = 7"), ("postgres", "EXTRACT(ISODOW FROM d) = 7")]


@pytest.mark.parametrize("dialect,sunday", WEEKDAYS)
def test_the_day_of_the_week_is_numbered_as_the_dialect_numbers_it(tmp_path, dialect, sunday):
    """BigQuery, MySQL, Spark and T-SQL number Sunday 1, Trino's ISO day Monday 1: read as
    DuckDB's Sunday 0, Sunday = 1 counted Mondays."""
    days = pd.date_range("2024-01-01", periods=400, freq="D")
    pd.DataFrame({"uid": range(400), "d": days.strftime("%Y-%m-%d")}).to_csv(
        tmp_path / "days.csv", index=False)
    meta = {"name": "days", "budget": {"epsilon": 1e12}, "tables": {"days": {
        "source": str(tmp_path / "days.csv"), "privacy_unit": None,
        "columns": {"uid": "int",
                    "d": {"type": "date", "lower": "2024-01-01", "upper": "2025-12-31"}}}}}
    sundays = sum(day.dayofweek == 6 for day in days)
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1,
                       dialect=dialect) as con:
        assert con.execute(f"SELECT COUNT(*) AS n FROM days WHERE {sunday}",
                           epsilon=1e9).fetchone()[0] == sundays
        part = sunday.split(" = ")[0]
        keys = [k for k, _ in con.execute(f"SELECT {part} AS k, COUNT(*) AS n FROM days "
                                          "GROUP BY k", epsilon=1e9).fetchall()]
        assert keys == (list(range(7)) if sunday.endswith("= 0") else list(range(1, 8)))


def test_a_logarithms_key_domain_holds_the_backends_whole_results(tmp_path):
    """CEIL(LOG10(x)) over [0.1, 1000]: the range was computed as ln(x) / ln(10), whose
    -0.9999999999999998 at 0.1 left the key -1 out of the domain (DuckDB's LOG10(0.1) is
    -1), so the rows at the bound were dropped."""
    values = [0.1, 0.5, 1, 9.9, 10, 999, 1000]
    (tmp_path / "t.csv").write_text("x\n" + "".join(f"{v}\n" for v in values))
    meta = {"name": "t", "budget": {"epsilon": 1e12}, "tables": {"t": {
        "source": str(tmp_path / "t.csv"), "privacy_unit": None,
        "columns": {"x": {"type": "float", "lower": 0.1, "upper": 1000}}}}}
    exact = dict(duckdb.sql(f"SELECT CEIL(LOG10(x)) AS k, COUNT(*) FROM "
                            f"read_csv_auto('{tmp_path}/t.csv') GROUP BY k").fetchall())
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        released = dict(con.execute("SELECT CEIL(LOG10(x)) AS k, COUNT(*) AS n FROM t "
                                    "GROUP BY k", epsilon=1e9).fetchall())
    assert {k: n for k, n in released.items() if n} == {k + 0.0: n for k, n in exact.items()}
