"""Equal-width public bins as one clamped FLOOR (evaluators._bins), shared by attribute
selection, Naive Bayes and the trees: the SQL bins what numpy bins, and the engine releases
every one of 10,000 bins from the metadata alone."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from evaluators._bins import EqualWidthBins
from evaluators.attribute_selection.contingency import equal_width_bins as selection_bins
from evaluators.decision_tree.attributes import (
    equal_width_bins,
    equal_width_thresholds,
    schema_from_metadata,
)

pytestmark = pytest.mark.filterwarnings("ignore::dpsql.InsecureRandomnessWarning")

EDGES = [-np.inf, -1.0, 0.0, 0.0025, 0.05, 0.07, 0.5, 0.9999, 1.0, 1.5, np.inf]


@pytest.mark.parametrize("bins", [EqualWidthBins(0, 1, 3), EqualWidthBins(0, 2.5, 100),
                                  EqualWidthBins(-3, 7, 10_000), EqualWidthBins(17, 74, 4)])
def test_the_sql_bins_every_value_as_numpy_does(bins):
    """Values out of range, on the edges, infinite: the first or the last bin, as the CASE
    chains put them; NULL stays NULL and NaN (NULL in a frame) falls in the last bin."""
    values = np.array(EDGES + list(np.linspace(-4, 75, 1001)))
    database = duckdb.connect()
    database.execute("CREATE TABLE t (x DOUBLE)")
    database.executemany("INSERT INTO t VALUES (?)", [[float(v)] for v in values]
                         + [[None], [float("nan")]])
    rows = database.execute(f"SELECT {bins.sql('x')} FROM t").fetchall()
    column = np.array([np.nan if v is None else v for (v,) in rows])
    np.testing.assert_array_equal(column[:len(values)], bins.index(values))
    assert rows[-2] == (None,) and column[-1] == bins.count - 1
    assert np.isnan(bins.index(np.array([np.nan])))[0]


def test_int_bins_are_the_tree_thresholds_bins():
    """A whole value's bin by the FLOOR is its bin by the tree's integer cut points, also with
    more bins than values (one a value) and where doubles put a cut one too high (36 / 28)."""
    for lower in (-2, 0, 17):
        for upper in range(lower + 1, lower + 40):
            for count in range(2, 45):
                cuts = equal_width_thresholds(lower, upper, count, integer=True)
                bins = equal_width_bins(lower, upper, count, integer=True)
                assert bins.count == len(cuts) + 1
                values = np.arange(lower - 2, upper + 3, dtype=float)
                np.testing.assert_array_equal(
                    bins.index(values), np.searchsorted(cuts, values, side="right"),
                    err_msg=f"[{lower}, {upper}] in {count} bins")
    assert equal_width_thresholds(0, 36, 28, integer=True)[6] == 9


def test_a_10000_bin_key_is_one_expression():
    """Each bin was a WHEN of a CASE: at --bins 10,000 a CM1 tree level sent 21 statements of
    10,000 WHENs and took minutes before the engine read a row."""
    metadata = {"name": "wide", "tables": {"t": {"privacy_unit": None, "columns": {
        "x": {"type": "float", "lower": 0, "upper": 25_000},
        "k": {"type": "int", "lower": 0, "upper": 99_999},
        "c": {"type": "text", "values": ["a", "b"]}}}}}
    schema = schema_from_metadata(metadata, "t", "c", numeric_bins=dpsql.MAX_DOMAIN_VALUES)
    for attribute in schema.attributes:
        assert attribute.size == 10_000
        assert len(attribute.value_sql()) < 200 and len(attribute.predicate_sql(9_999)) < 200
    assert len(selection_bins("x", 0, 25_000, dpsql.MAX_DOMAIN_VALUES).key) < 200


def test_the_engine_releases_every_one_of_10000_bins(tmp_path):
    """The clamped FLOOR is a key of public domain 0 .. 9,999 to dpsql (from the metadata's
    bounds): every bin released, empty ones too, with the counts numpy gives."""
    values = np.concatenate([np.linspace(-10, 110, 4001), [0.0, 100.0, 0.01, 99.99]])
    database = str(tmp_path / "t.duckdb")
    with duckdb.connect(database) as con:
        con.execute("CREATE TABLE t (x DOUBLE, c VARCHAR)")
        con.executemany("INSERT INTO t VALUES (?, 'a')", [[float(v)] for v in values])
        con.execute("INSERT INTO t VALUES (NULL, 'a')")
    metadata = {"name": "t", "budget": {"epsilon": 1e9}, "tables": {"t": {
        "privacy_unit": None, "columns": {"x": {"type": "float", "lower": 0, "upper": 100},
                                          "c": {"type": "text", "values": ["a"]}}}}}
    attribute = schema_from_metadata(metadata, "t", "c", numeric_bins=10_000).attribute("x")
    assert attribute.bins == EqualWidthBins(0, 100, 10_000)
    with dpsql.connect(database, metadata=metadata, ledger=":memory:",
                       insecure_seed=1) as connection:
        released = connection.cursor().execute(
            f"SELECT {attribute.value_sql()} AS b, COUNT(*) AS n FROM t GROUP BY 1",
            epsilon=1e6).fetchdf()
    assert sorted(released["b"]) == list(range(10_000))
    expected = np.bincount(attribute.encode(pd.Series(values)), minlength=10_000)
    counts = released.sort_values("b")["n"].to_numpy()
    np.testing.assert_allclose(counts, expected, atol=0.5)
