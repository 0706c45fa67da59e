"""Naive Bayes matches values to their public domain value by value, never through column text:
pandas formats a column from all its values, so one NULL among ints read every other value as
'1.0' and the exact baseline, the test predictions and the class labels matched nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from odd_values import ODD_ROWS, labelled, with_row

import dpsql
from dpsql.catalog import load_catalog
from dpsql.randomize import RandomizationSpec
from evaluators.attribute_selection.contingency import catalog_attributes, encode_frame
from evaluators.experiments.naive_bayes_rr import binarize
from evaluators.naive_bayes.cli import Holdout, accuracy, fit_central, fit_exact, fit_randomized

ROWS = 500


COLUMNS = {"a": {"type": "int", "values": [1, 2, 3]},
           "t": {"type": "timestamp", "values": ["2020-01-01 00:00:00", "2020-01-02 00:00:00"]},
           "flag": {"type": "bool", "values": [False, True]},
           "x": {"type": "float", "lower": -10, "upper": 10},
           "c": {"type": "int", "values": [0, 1]}}


def _metadata(attributes=("a", "t", "flag")) -> dict:
    return {"tables": {"t": {"privacy_unit": None, "columns": {
        name: COLUMNS[name] for name in (*attributes, "c")}}}}


def _holdout(train: pd.DataFrame, test: pd.DataFrame, attributes=("a", "t", "flag")) -> Holdout:
    columns = [*attributes, "c"]
    return Holdout(load_catalog(_metadata(attributes)).table("t"), "c", train[columns],
                   test[columns])




@pytest.mark.parametrize("odd", list(ODD_ROWS))
def test_one_odd_row_leaves_the_exact_baseline_and_the_predictions_as_they_were(odd):
    """An int attribute or class holding one NULL among 500 rows (read as floats: '1.0'), or
    one timestamp past midnight (the others then written in full), matched no domain value:
    the exact baseline lost the other rows' values and the test rows' predictions changed."""
    train, test = labelled(ROWS, 1), labelled(200, 2)
    plain = _holdout(train, test)
    plain_model = fit_exact(plain)
    exact = accuracy(plain_model, plain)
    assert exact > 0.85
    odd_train = _holdout(with_row(train, **ODD_ROWS[odd]), test)
    odd_model = fit_exact(odd_train)
    assert odd_model.classes == plain_model.classes == ["0", "1"]
    for attribute, (_, log_prob) in plain_model.categorical.items():
        # one row of 500 moves each P(value | class) by less than 1/250
        np.testing.assert_allclose(np.exp(odd_model.categorical[attribute][1]),
                                   np.exp(log_prob), atol=1 / 250)
    assert accuracy(odd_model, odd_train) == exact
    # one odd test row changes no other row's prediction
    odd_test = with_row(test, **ODD_ROWS[odd])
    predicted = plain_model.predict(odd_test[plain.attributes])
    np.testing.assert_array_equal(predicted[:len(test)], plain_model.predict(test))
    assert accuracy(plain_model, _holdout(train, odd_test)) == pytest.approx(exact, abs=0.01)


def test_an_int_class_with_a_null_names_its_classes_as_declared_under_randomized_response(
        tmp_path):
    """The randomized table's class column read back with a NULL gave classes '0.0' and
    '1.0', which no true test label ('0', '1') equalled (accuracy 0), and a TRR attribute's
    moments under those names failed the model."""
    train, test = labelled(ROWS, 1), labelled(200, 2)
    holdout = _holdout(with_row(train, a=1, t=pd.Timestamp("2020-01-01"), flag=True, x=0.0,
                                 c=None), test, attributes=("a", "t", "flag", "x"))
    exact = accuracy(fit_exact(holdout), holdout)
    spec = RandomizationSpec(p=1 - 1e-9, trr_a_variance=0.01, trr_b_variance=0.01)
    model, _ = fit_randomized(holdout, spec, dpsql.RandomSource(insecure_seed=4), tmp_path)
    assert model.classes == ["0", "1"] and list(model.gaussian) == ["x"]
    assert exact > 0.9
    assert accuracy(model, holdout) == pytest.approx(exact, abs=0.03)


@pytest.mark.parametrize("attribute", ["flag", "a"])
def test_the_central_model_reads_declared_values_and_their_labels(tmp_path, attribute):
    """The central model holds the declared values (matched by value, a column read as bools
    matches neither of the release's labels 'False' and 'True'), and a frame of labels
    (encode_frame's '1' for 1) reads as the values do."""
    holdout = _holdout(labelled(ROWS, 1), labelled(200, 2), attributes=(attribute,))
    model, _ = fit_central(holdout, 1e4, tmp_path, insecure_seed=3)
    exact = fit_exact(holdout)
    test = holdout.test[[attribute]]
    np.testing.assert_array_equal(model.predict(test), exact.predict(test))
    assert accuracy(model, holdout) == accuracy(exact, holdout) > 0.7
    labels = encode_frame(holdout.test, catalog_attributes(_metadata((attribute,)), "t", "c")[0])
    np.testing.assert_array_equal(model.predict(labels), model.predict(test))


@pytest.mark.parametrize("odd", list(ODD_ROWS))
def test_binarize_matches_the_train_mode_by_value(odd):
    """The experiment's binarization compared column texts: one NULL in train's int attribute
    made its mode '1.0', which no test value ('1') equalled, and one timestamp past midnight
    wrote train's in full: every test value was 'other'."""
    train, test = labelled(ROWS, 1), labelled(200, 2)
    plain = binarize(_holdout(train, test))
    binarized = binarize(_holdout(with_row(train, **ODD_ROWS[odd]), test))
    for name in plain.attributes:
        assert 0.3 < (plain.test[name] == "mode").mean() < 0.7, name
        pd.testing.assert_series_equal(binarized.test[name], plain.test[name])
        pd.testing.assert_series_equal(binarized.train[name].iloc[:ROWS], plain.train[name])
