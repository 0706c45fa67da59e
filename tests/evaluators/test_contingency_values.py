"""Attribute selection matches values and classes to their public domains value by value,
never through column text: pandas formats a column from all its values, so one NULL among ints
read every other value as '1.0', which no declared label equalled."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dpsql
from evaluators.attribute_selection.contingency import (
    Attribute,
    catalog_attributes,
    encode_frame,
    exact_tables,
    release_tables,
)
from evaluators.attribute_selection.selection import select_exact

pytestmark = pytest.mark.filterwarnings("ignore::dpsql.InsecureRandomnessWarning")

COLUMNS = {"a": {"type": "int", "values": [1, 2, 3]},
           "flag": {"type": "bool", "values": [False, True]},
           "c": {"type": "int", "values": [0, 1]}}
ATTRIBUTES = ("a", "t", "flag")


def _frame(rows: int = 300, seed: int = 1) -> pd.DataFrame:
    """a, t and flag each predict the class c (ints, timestamps at midnight, bools)."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 2, rows)
    a = np.where(rng.random(rows) < 0.8, c + 1, 3)
    day = np.where(rng.random(rows) < 0.7, c, 1 - c)
    flag = np.where(rng.random(rows) < 0.75, c == 1, c == 0)
    return pd.DataFrame({"a": a, "t": pd.Timestamp("2020-01-01") + pd.to_timedelta(day, "D"),
                         "flag": flag, "c": c})


def _with_row(frame: pd.DataFrame, **row) -> pd.DataFrame:
    """``frame`` and one more row, typed as pandas reads them: an int column holding a NULL
    is floats, a bool one objects."""
    return pd.concat([frame, pd.DataFrame([row])], ignore_index=True).infer_objects()


def _metadata(source=None, days=("2020-01-01", "2020-01-02")) -> dict:
    table = {"privacy_unit": None,
             "columns": {**COLUMNS, "t": {"type": "timestamp", "values": list(days)}}}
    if source is not None:
        table["source"] = str(source)
    return {"tables": {"t": table}, "budget": {"epsilon": 1.0e6}}


def test_an_int_column_with_a_null_encodes_to_its_labels():
    """The brief's repro: ['1.0', '2.0', <NA>] before, which matched no label."""
    encoded = Attribute("a", ("1", "2")).encode(pd.Series([1.0, 2.0, None]))
    assert encoded.tolist() == ["1", "2", pd.NA]


ODD_ROWS = {
    "NULL int attribute": {"a": None, "t": pd.Timestamp("2020-01-01"), "flag": True, "c": 1},
    "NULL int class": {"a": 1, "t": pd.Timestamp("2020-01-01"), "flag": True, "c": None},
    "NULL bool": {"a": 1, "t": pd.Timestamp("2020-01-01"), "flag": None, "c": 1},
    "timestamp past midnight": {"a": 1, "t": pd.Timestamp("2020-01-02 12:00"), "flag": True,
                                "c": 1},
}


@pytest.mark.parametrize("odd", list(ODD_ROWS))
def test_one_odd_row_moves_the_exact_tables_by_at_most_its_own_cells(odd):
    """One NULL in the int attribute emptied its whole table, one in the int class every
    table (classes '0.0', '1.0'); one timestamp past midnight emptied the timestamp's."""
    frame = _frame()
    attributes, classes = catalog_attributes(_metadata(), "t", "c", ATTRIBUTES)
    plain = exact_tables(frame, "c", attributes, classes)
    assert all(table.sum() == len(frame) for table in plain.values())
    with_odd = _with_row(frame, **ODD_ROWS[odd])
    tables = exact_tables(with_odd, "c", attributes, classes)
    for name, table in plain.items():
        assert np.abs(tables[name] - table).sum() <= 1, name
    assert select_exact(with_odd, "c", attributes, classes, "chi2").ranking == \
        select_exact(frame, "c", attributes, classes, "chi2").ranking


def test_encode_frame_reads_odd_columns_as_labels():
    frame = _with_row(_frame(), a=None, t=pd.Timestamp("2020-01-02 12:00"), flag=None, c=1)
    attributes, _ = catalog_attributes(_metadata(), "t", "c", ATTRIBUTES)
    encoded = encode_frame(frame, attributes)
    for attribute in attributes:
        kept = encoded[attribute.name].dropna()
        assert set(kept) == set(attribute.domain), attribute.name
        assert len(kept) == len(frame) - 1  # the NULL, or the time outside the domain


@pytest.mark.parametrize("days", [("2020-01-01", "2020-01-02"),
                                  ("2020-01-01T00:00:00", "2020-01-02T00:00:00")])
def test_released_keys_are_matched_to_declared_values_by_value(tmp_path, days):
    """A timestamp domain declared as '2020-01-01' or '2020-01-01T00:00:00' equalled no
    released key's text ('2020-01-01 00:00:00'): the release was charged, then failed as an
    InternalError ('released key outside the public domain')."""
    frame = _frame()
    frame.to_parquet(tmp_path / "t.parquet", index=False)
    metadata = _metadata(tmp_path / "t.parquet", days)
    attributes, classes = catalog_attributes(metadata, "t", "c", ATTRIBUTES)
    with dpsql.connect(None, metadata=metadata, ledger=":memory:", insecure_seed=1) as connection:
        release = release_tables(connection, "t", "c", attributes, classes, 1.0e4,
                                 with_class_count=True)
    exact = exact_tables(frame, "c", attributes, classes)
    for name, table in exact.items():
        np.testing.assert_allclose(release.tables[name], table, atol=2)
    np.testing.assert_allclose(release.class_counts, np.bincount(frame["c"]), atol=2)
    assert release.classes == ("0", "1")
