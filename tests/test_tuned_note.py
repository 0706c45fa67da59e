"""The contribution note of a statement answered under bounds tune= chose from the data says
so: it ended "(dpsql tune proposes bounds)", advice for bounds that are the metadata's, odd
where tune= had just chosen them. ``Engine.under(catalog, tuned=True)`` is the engine tune=
answers with (dpsql/autotune.py)."""

from __future__ import annotations

import pytest

QUERY = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"
METADATA = "(dpsql tune proposes bounds)"
TUNED = "(chosen from the data by tune=: cursor.tuned_bounds)"


@pytest.mark.parametrize(("tuned", "said", "not_said"), [(False, METADATA, TUNED),
                                                         (True, TUNED, METADATA)])
def test_the_note_says_who_chose_the_bounds(connect, tuned, said, not_said):
    engine = connect()._engine
    under = engine.under(engine.catalog, tuned=tuned)
    try:
        notes = under.execute(QUERY, epsilon=1)[0].notes
    finally:
        under.close()
    assert any(said in note for note in notes), notes
    assert not any(not_said in note for note in notes)
