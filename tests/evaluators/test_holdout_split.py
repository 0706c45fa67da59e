"""The evaluators' train/test split keeps neighbours neighbours (``evaluators._holdout``).

Split by a fixed count of rows, adding one person with many rows moved other persons' rows
between the parts (the training part kept its size), so the training counts the engine noised
for that person's bounded contribution moved by about sqrt(rows · f · (1 − f)): adversary
round L measured 57 rows against a sensitivity of 1. Drawn person by person, the training
part of D′ is that of D plus, or not, the added person's rows: with one seed and the person
placed last, every other row falls on the same side.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import catalogue, make_visits

from evaluators.decision_tree.holdout import split_holdout
from evaluators.naive_bayes.cli import load_holdout

HEAVY = pd.DataFrame({"uid": -1, "day": "Sun", "amount": 99.0, "region_id": 4,
                      "member": "yes"}, index=range(3000))


def _dataset(folder, frame: pd.DataFrame, row_privacy: bool) -> str:
    frame.to_csv(folder / "visits.csv", index=False)
    raw = catalogue(folder)
    visits = raw["tables"]["visits"]
    visits["columns"]["member"] = {"type": "text", "values": ["yes", "no"]}
    if row_privacy:
        visits["privacy_unit"] = None
        del visits["max_groups_per_unit"], visits["max_rows_per_group"]
    raw["tables"] = {"visits": visits}
    path = folder / "visits.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _sides(folder, frame: pd.DataFrame, evaluator: str, row_privacy: bool
           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    metadata = _dataset(folder, frame, row_privacy)
    if evaluator == "tree":
        holdout = split_holdout(metadata, "visits", "member", test_fraction=0.3,
                                directory=folder, seed=5, ledger=":memory:")
        with duckdb.connect(str(holdout.train_database)) as con:
            train = con.execute("SELECT * FROM visits").df()
        return train, holdout.test
    holdout = load_holdout(metadata, "visits", "member", test_fraction=0.3,
                           attributes=["day", "region_id"], rng=np.random.default_rng(5),
                           ledger=":memory:")
    return holdout.train, holdout.test


@pytest.mark.parametrize("row_privacy", [False, True], ids=["uid", "rows"])
@pytest.mark.parametrize("evaluator", ["tree", "naive-bayes"])
def test_adding_a_person_moves_no_other_row_between_the_parts(tmp_path, evaluator,
                                                             row_privacy):
    visits = make_visits(people=600)
    visits["member"] = np.where(visits["uid"] % 3 == 0, "yes", "no")
    heavy = HEAVY.iloc[:1] if row_privacy else HEAVY  # under row privacy a person is a row
    d, d_prime = tmp_path / "d", tmp_path / "d_prime"
    d.mkdir(), d_prime.mkdir()
    train, test = _sides(d, visits, evaluator, row_privacy)
    train2, test2 = _sides(d_prime, pd.concat([visits, heavy], ignore_index=True), evaluator,
                           row_privacy)
    columns = ["uid", "day", "region_id"] if evaluator == "tree" or not row_privacy \
        else ["day", "region_id"]

    def counts(frame):
        return frame[columns].astype(str).value_counts()

    moved = counts(train2).sub(counts(train), fill_value=0)
    added = counts(heavy).reindex(moved.index, fill_value=0)
    # the training part of D′ is D's, plus either all of the person's rows or none
    assert (moved == 0).all() or (moved == added).all(), moved[moved != 0]
    assert len(test) > 0 and len(train) > 0
