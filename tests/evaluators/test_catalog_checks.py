"""The table and class column every classifying evaluator needs: one check, one message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpsql
from evaluators.anonymization.cli import default_qids
from evaluators.attribute_selection.contingency import catalog_attributes
from evaluators.decision_tree.attributes import schema_from_metadata
from evaluators.naive_bayes.cli import load_holdout

METADATA = {"name": "t", "budget": {"epsilon": 1}, "tables": {"people": {
    "privacy_unit": None, "columns": {
        "label": {"type": "text", "values": ["no", "yes"]},
        "age": {"type": "int", "lower": 0, "upper": 99},
        "city": {"type": "text"}}}}}

READERS = {
    "attribute selection": lambda target: catalog_attributes(METADATA, "people", target),
    "decision tree": lambda target: schema_from_metadata(METADATA, "people", target),
    "naive bayes": lambda target: load_holdout(METADATA, "people", target, test_fraction=0.3,
                                               rng=np.random.default_rng(0)),
}


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_misspelt_class_is_named_as_unknown_with_the_columns(reader):
    with pytest.raises(dpsql.UnknownColumnError, match="no column 'lable'") as refused:
        reader("lable")
    assert refused.value.hint == "columns are ['age', 'city', 'label']"


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_class_without_declared_values_is_refused(reader):
    with pytest.raises(dpsql.ProgrammingError, match="'city' of table 'people' has no declared"):
        reader("city")


@pytest.mark.parametrize("reader", [
    lambda: catalog_attributes(METADATA, "folks", "label"),
    lambda: schema_from_metadata(METADATA, "folks", "label"),
    lambda: load_holdout(METADATA, "folks", "label", test_fraction=0.3,
                         rng=np.random.default_rng(0)),
    lambda: default_qids(METADATA, "folks", Path("."), None),
], ids=["attribute selection", "decision tree", "naive bayes", "anonymization"])
def test_an_unknown_table_is_named_with_the_tables(reader):
    with pytest.raises(dpsql.UnknownTableError, match="'folks' is not in the metadata") as refused:
        reader()
    assert refused.value.hint == "tables are ['people']"
