"""The note that rows beyond the contribution bounds are dropped is shown only where the
plan can drop rows: a statement over a subquery grouped by the unit alone (one row a person
by its SQL) drops none, yet said that rows beyond 1 group × 1 row are a bias the intervals
do not cover (a tester's per-customer order counts, exact apart from the noise)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fuzz"))
from neighbours import open_neighbours

PER_PERSON = "(SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid{having}) s"
DROPPED = "rows beyond are dropped before the noise"


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    pair = open_neighbours(tmp_path_factory.mktemp("note"), 0)
    yield pair.d
    pair.close()


def _notes(con, sql: str) -> tuple[str, ...]:
    return con.cursor().execute(sql, epsilon=1).notes


@pytest.mark.parametrize("sql", [
    f"SELECT LEAST(n, 10) AS k, COUNT(*) AS c FROM {PER_PERSON.format(having='')} GROUP BY 1",
    f"SELECT AVG(LEAST(n, 10)) AS a FROM {PER_PERSON.format(having=' HAVING COUNT(*) > 1')} "
    "WHERE n < 100",
])
def test_one_row_a_person_by_the_sql_drops_nothing(con, sql):
    assert not any(DROPPED in note for note in _notes(con, sql))


@pytest.mark.parametrize("sql", [
    "SELECT day, COUNT(*) AS c FROM visits GROUP BY day",
    # grouped by the unit and a day: a person has a row a day, 2 kept of each group
    "SELECT LEAST(n, 10) AS k, COUNT(*) AS c FROM (SELECT uid, day, COUNT(*) AS n "
    "FROM visits GROUP BY uid, day) s GROUP BY 1",
])
def test_rows_the_bounds_can_drop_are_noted(con, sql):
    assert any(DROPPED in note for note in _notes(con, sql))
