"""Attribute selection matches values and classes to their public domains value by value,
never through column text: pandas formats a column from all its values, so one NULL among ints
read every other value as '1.0', which no declared label equalled."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from odd_values import ODD_ROWS, labelled, with_row

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




@pytest.mark.parametrize("odd", list(ODD_ROWS))
def test_one_odd_row_moves_the_exact_tables_by_at_most_its_own_cells(odd):
    """One NULL in the int attribute emptied its whole table, one in the int class every
    table (classes '0.0', '1.0'); one timestamp past midnight emptied the timestamp's."""
    frame = labelled(300, 1)
    attributes, classes = catalog_attributes(_metadata(), "t", "c", ATTRIBUTES)
    plain = exact_tables(frame, "c", attributes, classes)
    assert all(table.sum() == len(frame) for table in plain.values())
    with_odd = with_row(frame, **ODD_ROWS[odd])
    tables = exact_tables(with_odd, "c", attributes, classes)
    for name, table in plain.items():
        assert np.abs(tables[name] - table).sum() <= 1, name
    assert select_exact(with_odd, "c", attributes, classes, "chi2").ranking == \
        select_exact(frame, "c", attributes, classes, "chi2").ranking


def test_encode_frame_reads_odd_columns_as_labels():
    frame = with_row(labelled(300, 1), a=None, t=pd.Timestamp("2020-01-02 12:00"), flag=None, c=1)
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
    frame = labelled(300, 1)
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
