"""A WHERE that no value the metadata declares passes is warned of (EmptyFilterWarning) and
noted in the answer, before anything runs, decided on the metadata and the literals alone:
a text compared with a value outside its declared values (Adult's workclass = ' Private',
copied with the CSV's leading space) and a date or timestamp range outside the column's
declared bounds (ts >= '2005-01-01' for bounds ending 2001-12-31, or the empty ts >= x AND
ts < x). The warning came from the compile stage only, so a statement asked again (its
compiled form reused: a notebook cell re-run, explain before execute) was answered without
it, and a server's clients never saw it; a date range was never warned of. The answer is
unchanged: a neighbour may hold such rows, and they are counted."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from neighbours import contract, every_neighbour  # noqa: E402

import dpsql  # noqa: E402

# events: d in [2000-01-01, 2001-12-31], ts in [2000-01-01 00:00:00, 2001-12-31 23:59:59]
EMPTY = [
    ("SELECT COUNT(*) AS n FROM visits WHERE day = ' Mon'", "no declared value of day"),
    ("SELECT DATE_TRUNC('month', ts) AS m, COUNT(*) AS n FROM events "
     "WHERE ts >= '2005-01-01' GROUP BY m", "no timestamp of ts within its declared bounds "
     "(2000-01-01 00:00:00 to 2001-12-31 23:59:59)"),
    ("SELECT COUNT(*) AS n FROM events WHERE ts >= '2001-03-01' AND ts < '2001-03-01'",
     "no timestamp of ts"),
    ("SELECT SUM(x) AS s FROM events WHERE d > DATE '2001-12-31'",
     "no date of d within its declared bounds (2000-01-01 to 2001-12-31)"),
    ("SELECT COUNT(*) AS n FROM events WHERE d BETWEEN '1990-01-01' AND '1999-12-31'",
     "no date of d"),
    ("SELECT COUNT(*) AS n FROM events WHERE '2005-01-01' <= d AND x > 1", "no date of d"),
    ("SELECT COUNT(*) AS n FROM events WHERE d IN ('1990-01-01', '2010-01-01')",
     "no date of d"),
]
# ranges that some instant within the bounds passes
NOT_EMPTY = [
    "SELECT COUNT(*) AS n FROM events WHERE d >= DATE '2001-12-31'",
    "SELECT COUNT(*) AS n FROM events WHERE ts >= '2001-12-31 23:59:59'",
    "SELECT COUNT(*) AS n FROM events WHERE ts >= '2001-03-01' AND ts <= '2001-03-01'",
    "SELECT COUNT(*) AS n FROM events WHERE d IN ('1990-01-01', '2001-01-01')",
    "SELECT COUNT(*) AS n FROM events WHERE d < '2000-01-01' OR d > '2001-01-01'",
    "SELECT COUNT(*) AS n FROM visits WHERE day = 'Mon'",
]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    yield from every_neighbour(tmp_path_factory.mktemp("empty-filters"))


def _warned(call) -> tuple[list[str], object]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        value = call()
    return [str(w.message) for w in seen if w.category is dpsql.EmptyFilterWarning], value


@pytest.mark.parametrize(("sql", "said"), EMPTY)
def test_every_ask_of_an_empty_filter_is_warned_and_noted(pairs, sql, said):
    con = pairs[1].d_prime
    explained, _ = _warned(lambda: con.explain(sql, epsilon=1))
    assert len(explained) == 1 and said in explained[0]
    for _ in range(2):  # the compiled form is reused: warned again
        spent = con.budget_spent
        executed, cursor = _warned(lambda: con.cursor().execute(sql, epsilon=1))
        assert executed == explained
        assert cursor.notes[0] == explained[0]
        assert con.budget_spent != spent  # answered and charged as before


@pytest.mark.parametrize("sql", NOT_EMPTY)
def test_a_range_within_the_bounds_is_not_warned_of(pairs, sql):
    said, _ = _warned(lambda: pairs[0].d.explain(sql, epsilon=1))
    assert said == []


def test_the_neighbour_contract_holds(pairs):
    # adversary 1 holds dates at ±infinity and past 9999: rows such filters keep on D′
    outcomes = contract(pairs, [sql for sql, _ in EMPTY])
    assert all(row == ["released"] * 3 for row in outcomes), outcomes
