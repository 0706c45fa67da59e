"""NaiveBayesModel from counts: equals scikit-learn's CategoricalNB on exact counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import require_dataset
from sklearn.naive_bayes import CategoricalNB, GaussianNB

import dpsql
from evaluators.naive_bayes import NaiveBayesModel

CAR_ATTRIBUTES = ["buying", "maint", "doors", "persons", "lug_boot", "safety"]


def _car() -> pd.DataFrame:
    return pd.read_csv(require_dataset("car.csv"), dtype=str)


def _exact_model(train: pd.DataFrame, attributes: list[str], alpha: float) -> NaiveBayesModel:
    classes = sorted(train["class"].unique())
    domains = {a: sorted(train[a].unique()) for a in attributes}
    feature_counts = {
        a: {key: float(n) for key, n in train.groupby([a, "class"]).size().items()}
        for a in attributes
    }
    class_counts = {c: float((train["class"] == c).sum()) for c in classes}
    return NaiveBayesModel.from_counts(class_counts, feature_counts, domains, alpha=alpha)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_exact_counts_match_sklearn_categorical_nb(alpha: float) -> None:
    car = _car()
    train, test = car.iloc[::3].copy(), car.drop(car.index[::3])
    model = _exact_model(train, CAR_ATTRIBUTES, alpha)

    encoded = {a: {v: i for i, v in enumerate(sorted(car[a].unique()))} for a in CAR_ATTRIBUTES}
    sk = CategoricalNB(alpha=alpha, min_categories=[len(encoded[a]) for a in CAR_ATTRIBUTES])
    sk.fit(np.column_stack([train[a].map(encoded[a]) for a in CAR_ATTRIBUTES]), train["class"])
    x_test = np.column_stack([test[a].map(encoded[a]) for a in CAR_ATTRIBUTES])

    assert list(sk.classes_) == model.classes
    np.testing.assert_array_equal(model.predict(test), sk.predict(x_test))
    np.testing.assert_allclose(model.predict_proba(test).to_numpy(), sk.predict_proba(x_test),
                               rtol=1e-9, atol=1e-12)


def test_negative_counts_are_clamped_then_smoothed() -> None:
    model = NaiveBayesModel.from_counts(
        {"y": 10, "n": -3},
        {"a": {("u", "y"): 10, ("v", "y"): -5, ("u", "n"): -2, ("v", "n"): 4}},
        {"a": ["u", "v"]},
    )
    # class prior: n clamps to 0 -> prior 0, never predicted
    assert model.class_log_prior[1] == -np.inf
    # y column: clamp (10, 0) + 1 -> (11, 1) / 12
    np.testing.assert_allclose(np.exp(model.categorical["a"][1][:, 0]), [11 / 12, 1 / 12])
    proba = model.predict_proba(pd.DataFrame({"a": ["u", "v", "w", None]}))
    assert np.isfinite(proba.to_numpy()).all()
    assert (model.predict(pd.DataFrame({"a": ["v"]})) == "y").all()


def test_unknown_and_missing_values_are_uninformative() -> None:
    model = NaiveBayesModel.from_counts(
        {"y": 3, "n": 1}, {"a": {("u", "y"): 3, ("v", "n"): 1}}, {"a": ["u", "v"]}
    )
    proba = model.predict_proba(pd.DataFrame({"a": ["w", None]}))
    np.testing.assert_allclose(proba.to_numpy(), [[0.75, 0.25], [0.75, 0.25]])


def test_gaussian_attributes_match_sklearn_gaussian_nb() -> None:
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.normal(0, 1, 200), rng.normal(2, 0.5, 100)])
    y = np.array(["a"] * 200 + ["b"] * 100)
    frame = pd.DataFrame({"x": x})
    moments = {c: (x[y == c].mean(), x[y == c].var()) for c in ("a", "b")}
    model = NaiveBayesModel.from_counts({"a": 200, "b": 100}, {}, {}, gaussian={"x": moments})
    sk = GaussianNB(var_smoothing=0.0).fit(x[:, None], y)
    np.testing.assert_allclose(model.predict_proba(frame).to_numpy(),
                               sk.predict_proba(x[:, None]), rtol=1e-6)


def test_user_errors_are_dpsql_errors() -> None:
    with pytest.raises(dpsql.ProgrammingError):
        NaiveBayesModel.from_counts({"y": 1}, {"a": {("u", "y"): 1}}, {})
    with pytest.raises(dpsql.ProgrammingError):
        NaiveBayesModel.from_counts({"y": 1}, {"a": {("zz", "y"): 1}}, {"a": ["u"]})
    model = NaiveBayesModel.from_counts({"y": 1}, {"a": {("u", "y"): 1}}, {"a": ["u"]})
    with pytest.raises(dpsql.ProgrammingError):
        model.predict(pd.DataFrame({"b": ["u"]}))
