"""A WHERE whose comparisons of a number column with literals leave no value within the
column's declared bounds (age > 200 for age 17..90, hours BETWEEN -5 AND -1, an int column
equal to 50.5) is warned of as a date range outside its bounds is (EmptyFilterWarning, first
in the answer's notes): the WHERE reads the raw value, so only rows outside the metadata's
bounds pass and the answer is likely noise alone. It said nothing before. Decided on the
metadata and the literals; the answer is unchanged, since a neighbour may hold such rows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from conftest import catalogue  # noqa: E402
from neighbours import contract, every_neighbour  # noqa: E402
from test_empty_filters import _warned  # noqa: E402

import dpsql  # noqa: E402

# adult: age int 17..90, hours int 1..99; visits: amount float 0..100; events: x float 0..10
EMPTY = [
    ("SELECT COUNT(*) AS n FROM adult WHERE age > 200",
     "no value of age within its declared bounds (17 to 90) passes the WHERE clause"),
    ("SELECT AVG(age) AS a FROM adult WHERE hours BETWEEN -5 AND -1",
     "no value of hours within its declared bounds (1 to 99)"),
    ("SELECT COUNT(*) AS n FROM adult WHERE 90 < age", "no value of age"),
    ("SELECT COUNT(*) AS n FROM adult WHERE age > 50 AND age < 51", "no value of age"),
    ("SELECT COUNT(*) AS n FROM adult WHERE age = 50.5", "no value of age"),
    ("SELECT COUNT(*) AS n FROM adult WHERE age IN (5, 300, NULL)", "no value of age"),
    ("SELECT day, SUM(amount) AS s FROM visits WHERE amount > 100 GROUP BY day",
     "no value of amount within its declared bounds (0 to 100)"),
    ("SELECT COUNT(*) AS n FROM visits WHERE amount < 0.0", "no value of amount"),
    ("SELECT SUM(x) AS s FROM events WHERE x BETWEEN 10.5 AND 1e300", "no value of x"),
    ("SELECT COUNT(*) AS n FROM (SELECT uid, MAX(amount) AS m FROM visits GROUP BY uid) t "
     "WHERE m > 100", "no value of m within its declared bounds (0 to 100)"),
]
# ranges that some value within the bounds passes, or that are not comparisons with literals
NOT_EMPTY = [
    "SELECT COUNT(*) AS n FROM adult WHERE age >= 90",
    "SELECT COUNT(*) AS n FROM adult WHERE age <= 17",
    "SELECT COUNT(*) AS n FROM adult WHERE age > 89.5",
    "SELECT COUNT(*) AS n FROM adult WHERE age > 50 AND age <= 51",
    "SELECT COUNT(*) AS n FROM adult WHERE age IN (5, 50)",
    "SELECT COUNT(*) AS n FROM adult WHERE age > 200 OR age < 50",
    "SELECT COUNT(*) AS n FROM adult WHERE age > hours + 200",
    "SELECT COUNT(*) AS n FROM visits WHERE amount >= 100",
    "SELECT COUNT(*) AS n FROM visits WHERE amount <= 0",
    "SELECT COUNT(*) AS n FROM visits WHERE amount > 99.99",
    "SELECT COUNT(*) AS n FROM visits WHERE uid > 1000000",  # uid has no bounds
    "SELECT COUNT(*) AS n FROM (SELECT uid, COUNT(*) AS c FROM visits GROUP BY uid) t "
    "WHERE c > 1000",  # a count of a person's rows has no declared bounds
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("empty-ranges"))


@pytest.mark.parametrize(("sql", "said"), EMPTY)
def test_a_number_range_outside_the_bounds_is_warned_and_noted(pairs, sql, said):
    con = pairs[1].d_prime
    explained, _ = _warned(lambda: con.explain(sql, epsilon=1))
    assert len(explained) == 1 and said in explained[0], explained
    assert "counts only rows outside the metadata's bounds" in explained[0]
    spent = con.budget_spent
    executed, cursor = _warned(lambda: con.cursor().execute(sql, epsilon=1))
    assert executed == explained and cursor.notes[0] == explained[0]
    assert con.budget_spent != spent  # answered and charged as before


@pytest.mark.parametrize("sql", NOT_EMPTY)
def test_a_range_some_value_within_the_bounds_passes_is_not_warned_of(pairs, sql):
    said, _ = _warned(lambda: pairs[0].d.explain(sql, epsilon=1))
    assert said == []


def test_a_column_with_values_and_bounds_is_warned_of_once(data_dir):
    meta = catalogue(data_dir)
    meta["tables"]["adult"]["columns"]["age"]["values"] = list(range(17, 91))
    with dpsql.connect(metadata=meta, ledger=":memory:") as con:
        said, _ = _warned(lambda: con.explain("SELECT COUNT(*) AS n FROM adult WHERE age > 200",
                                              epsilon=1))
    assert len(said) == 1 and "no declared value of age" in said[0]


def test_the_neighbour_contract_holds(pairs):
    # adversary 1 holds ages and amounts at the BIGINT limits and ±1e20: rows these keep
    outcomes = contract(pairs, [sql for sql, _ in EMPTY])
    assert all(row == ["released"] * 3 for row in outcomes), outcomes
