"""``missing_value``: a column's NULLs are read as a declared value (SmartNoise's key)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

import dpsql
from dpsql.catalog import load_catalog

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))  # the neighbour harness
from attack_grammar import fuzzed  # noqa: E402
from neighbours import (  # noqa: E402
    VARIANTS,
    base_tables,
    check_statement,
    every_neighbour,
    open_pair,
    variant_of,
    with_rows,
)

# a lower bound above 0: a price that left a sum would move it by 50 > U − L = 40
PRICE = {"type": "float", "lower": 10, "upper": 50, "missing_value": 10}
ITEM = {"type": "text", "values": ["a", "b", "c"], "missing_value": "c"}
AGE = {"age": {"type": "int", "lower": 17, "upper": 90, "missing_value": 17}}


def _table(**column) -> dict:
    return {"tables": {"t": {"privacy_unit": "uid", "max_groups_per_unit": 1,
                             "max_rows_per_group": 1,
                             "columns": {"uid": "int", **column}}}}


@pytest.mark.parametrize("column,message", [
    ({"type": "int", "missing_value": "0"}, "must be a int value"),
    ({"type": "int", "missing_value": True}, "must be a int value"),
    ({"type": "float", "missing_value": float("nan")}, "must be a float value"),
    ({"type": "bool", "missing_value": 0}, "must be a bool value"),
    ({"type": "int", "lower": 0, "upper": 9, "missing_value": 10}, "outside [0, 9]"),
    ({"type": "date", "lower": "2024-01-01", "upper": "2024-12-31",
      "missing_value": "2023-12-31"}, "outside"),
    ({"type": "date", "missing_value": "yesterday"}, "ISO date"),
    ({"type": "text", "values": ["a", "b"], "missing_value": "c"}, "not one of the column's"),
])
def test_a_missing_value_is_checked_against_type_bounds_and_domain(column, message):
    with pytest.raises(dpsql.CatalogError, match=message.replace("[", r"\[")):
        load_catalog(_table(x=column))


def test_the_privacy_unit_has_no_missing_value():
    meta = _table()
    meta["tables"]["t"]["columns"]["uid"] = {"type": "int", "missing_value": 0}
    with pytest.raises(dpsql.CatalogError, match="privacy unit 'uid' cannot have"):
        load_catalog(meta)


@pytest.fixture
def nulls(tmp_path):
    """A row-privacy table whose x, d and s hold NULLs."""
    (tmp_path / "t.csv").write_text("g,x,d,s\na,1,2020-01-05,v\na,,,\nb,3,2020-03-01,u\n"
                                    "b,,2020-02-02,\n")
    meta = {"name": "m", "budget": {"epsilon": 1e12}, "tables": {"t": {
        "privacy_unit": None, "source": str(tmp_path / "t.csv"), "columns": {
            "g": {"type": "text", "values": ["a", "b"]},
            "x": {"type": "float", "lower": 0, "upper": 10, "missing_value": 5},
            "d": {"type": "date", "lower": "2020-01-01", "upper": "2020-12-31",
                  "missing_value": "2020-06-01"},
            "s": {"type": "text", "values": ["u", "v"], "missing_value": "u"}}}}}
    con = dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1)
    yield con
    con.close()


def test_nulls_are_read_as_the_missing_value(nulls):
    rows = nulls.execute("SELECT g, COUNT(*) AS n, AVG(x) AS a, SUM(x) AS s FROM t GROUP BY g "
                         "ORDER BY g", epsilon=1e9).fetchall()
    assert [(g, n, round(a, 3), round(s, 3)) for g, n, a, s in rows] == [
        ("a", 2, 3.0, 6.0), ("b", 2, 4.0, 8.0)]
    assert nulls.execute("SELECT s, COUNT(*) AS n FROM t GROUP BY s ORDER BY s",
                         epsilon=1e9).fetchall() == [("u", 3), ("v", 1)]
    assert nulls.execute("SELECT COUNT(*) AS n FROM t WHERE d = DATE '2020-06-01'",
                         epsilon=1e9).fetchall() == [(1,)]
    assert nulls.execute("SELECT COUNT(*) AS n FROM t WHERE x IS NULL",
                         epsilon=1e9).fetchall() == [(0,)]


def test_a_never_null_column_shares_the_count_of_every_row(nulls):
    """COUNT(*), SUM(x) and AVG(x) of a column without NULLs: two measurements, not three."""
    plan = nulls.explain("SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a FROM t GROUP BY g",
                         epsilon=1)
    assert sorted(p["part"] for p in plan["statements"][0]["aggregates"]) == ["count", "sum"]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """(D, D′ = D plus each adversarial person, many of whose prices and items are NULL),
    with NULL prices read as 10, NULL items as 'c' and NULL ages as 17."""
    yield from every_neighbour(tmp_path_factory.mktemp("missing"), price=PRICE, item=ITEM,
                               adult=AGE)


STATEMENTS = [
    "SELECT item, COUNT(*) AS n, SUM(price) AS s, AVG(price) AS a FROM purchases GROUP BY item",
    "SELECT COUNT(price) AS n, SUM(price) AS s FROM purchases",
    "SELECT item, SUM(price) AS s FROM purchases GROUP BY item",
    "SELECT item, COUNT(*) AS n FROM purchases WHERE price IS NULL GROUP BY item",
    "SELECT item, VAR_SAMP(price) AS v FROM purchases GROUP BY item",
]


@pytest.mark.parametrize("sql", STATEMENTS)
@pytest.mark.parametrize("variant", range(VARIANTS))
def test_missing_values_keep_the_neighbour_contract(pairs, sql, variant):
    assert check_statement(pairs[variant], sql) == "released"


@fuzzed(300)
def test_adversarial_statements_over_missing_values_keep_the_contract(pairs, case):
    """The neighbour fuzz's attack grammar (IS NULL tests, COALESCE, casts, extreme values,
    scripts, joins) over columns whose NULLs are read as declared values."""
    sql, script, delta = case
    check_statement(pairs[variant_of(sql)], sql, script=script, delta=delta)


def _adult(age) -> dict:
    return {"adult": pd.DataFrame({"age": [age], "hours": [40], "education": ["HS-grad"],
                                   "sex": ["Male"], "salary": ["<=50K"]}).astype(object)}


@pytest.mark.parametrize("sql", [
    "SELECT SUM(age) AS s FROM adult",
    "SELECT sex, SUM(age) AS s, AVG(age) AS a, COUNT(*) AS n FROM adult GROUP BY sex",
    "SELECT COUNT(age) AS n FROM adult WHERE age IS NULL",
])
def test_an_age_replaced_by_null_moves_sums_by_the_bounds_only(tmp_path, sql):
    """Row privacy under replace: a person of age 90 replaced by one whose age is NULL. Read
    as 17, SUM(age) moves by U − L = 73, the sensitivity of a sum no row can leave; were the
    NULL not replaced, the age would leave the sum and move it by 90."""
    base = base_tables()
    pair = open_pair(tmp_path, with_rows(base, _adult(90)), with_rows(base, _adult(None)),
                     neighbouring="replace",
                     adult=AGE)
    try:
        assert check_statement(pair, sql) == "released"
    finally:
        pair.close()


@pytest.mark.parametrize("written", ["20200601", "2020-W22-1", "2020-06-01 00:00:00"])
def test_a_date_missing_value_is_read_in_any_iso_spelling(tmp_path, written):
    """A date missing_value the catalogue accepted ('20200601', an ISO week day) was put in
    the SQL as written: every statement reading the column failed, after the charge, and
    '2020-06-01 00:00:00' raised a bare ValueError (adversary round 29h)."""
    (tmp_path / "t.csv").write_text("g,d\na,2020-01-05\na,\n")
    meta = {"name": "m", "budget": {"epsilon": 1e12}, "tables": {"t": {
        "privacy_unit": None, "source": str(tmp_path / "t.csv"), "columns": {
            "g": {"type": "text", "values": ["a"]},
            "d": {"type": "date", "lower": "2020-01-01", "upper": "2020-12-31",
                  "missing_value": written}}}}}
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        day = "2020-06-01" if written != "2020-W22-1" else "2020-05-25"
        assert con.execute(f"SELECT COUNT(*) AS n FROM t WHERE d = DATE '{day}'",
                           epsilon=1e9).fetchall() == [(1,)]
