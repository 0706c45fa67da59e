"""Central and local Naive Bayes on a table whose person (uid) holds many rows: the train copy
keeps the privacy unit, its contribution bounds and the dataset's neighbouring."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from conftest import catalogue, make_visits

import dpsql
from dpsql.randomize import RandomizationSpec, write_data
from evaluators._cli import EXACT
from evaluators.attribute_selection.contingency import catalog_attributes, contingency_statements
from evaluators.naive_bayes.cli import (
    command,
    fit_central,
    fit_randomized,
    load_holdout,
    train_metadata,
)

ATTRIBUTES = ["day", "region_id"]
HEAVY_ROWS = 300


def _dataset(folder, frame: pd.DataFrame, *, row_privacy: bool = False) -> str:
    """A one-table dataset: visits (uid, L0 = 3, L∞ = 2) with a class ``member`` per person;
    with ``row_privacy`` the same rows, one person each, under replace neighbours."""
    frame.to_csv(folder / "visits.csv", index=False)
    raw = catalogue(folder, neighbouring="replace" if row_privacy else "add_remove")
    visits = raw["tables"]["visits"]
    visits["columns"]["member"] = {"type": "text", "values": ["yes", "no"]}
    if row_privacy:
        for key in ("max_groups_per_unit", "max_rows_per_group"):
            del visits[key]
        visits["privacy_unit"] = None
    raw["tables"] = {"visits": visits}
    path = folder / "visits.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _visits() -> pd.DataFrame:
    frame = make_visits()
    frame["member"] = np.where(frame["uid"] % 3 == 0, "yes", "no")
    return frame


def _holdout(metadata: str):
    return load_holdout(metadata, "visits", "member", test_fraction=0.3, attributes=ATTRIBUTES,
                        rng=np.random.default_rng(0), ledger=":memory:")


def _sensitivity(metadata, script: str) -> tuple[str, float]:
    connection = dpsql.connect(None, metadata=metadata, ledger=":memory:")
    try:
        plan = connection.explain(script, epsilon=1.0)
    finally:
        connection.close()
    return plan["neighbouring"], float(plan["total_sensitivity"])


@pytest.mark.parametrize("row_privacy", [False, True], ids=["uid add_remove", "rows replace"])
def test_train_copy_plans_the_datasets_sensitivity(tmp_path, row_privacy) -> None:
    metadata = _dataset(tmp_path, _visits(), row_privacy=row_privacy)
    holdout = _holdout(metadata)
    source = tmp_path / "train.parquet"
    write_data(holdout.train, source)
    copy = train_metadata(holdout, source, 1.0, metadata)
    candidates, _ = catalog_attributes(copy, "visits", "member", ATTRIBUTES, 5)
    script = ";\n".join(contingency_statements("visits", "member", candidates,
                                               with_class_count=True))
    # uid: day and region (3 cells of 2 rows each) and the class count (2 cells of 2 rows);
    # rows under replace: one row moves 2 cells of each of the 3 counts
    expected = ("replace", 6.0) if row_privacy else ("add_remove", 16.0)
    assert _sensitivity(metadata, script) == expected
    assert _sensitivity(copy, script) == expected


def test_one_heavy_person_moves_the_central_model_by_their_bounded_rows(tmp_path) -> None:
    holdout = _holdout(_dataset(tmp_path, _visits()))
    heavy = pd.DataFrame({"uid": 10**6, "day": "Mon", "region_id": 0, "member": "yes"},
                         index=range(HEAVY_ROWS))
    neighbour = dataclasses.replace(holdout, train=pd.concat([holdout.train, heavy],
                                                             ignore_index=True))
    # ε 10^6: the noise is far below one count, so the priors are those of the bounded counts
    priors = [np.exp(fit_central(h, 1e6, tmp_path, insecure_seed=3)[0].class_log_prior)
              for h in (holdout, neighbour)]
    counted = holdout.train.groupby(["uid", "member"]).size().clip(upper=2).sum()
    # the heavy person adds at most L∞ = 2 rows to the class counts (row privacy: 300)
    assert np.abs(priors[1] - priors[0]).max() <= 2 / counted


def test_privacy_unit_is_kept_for_bounding_but_never_modelled(tmp_path) -> None:
    metadata = _dataset(tmp_path, _visits())
    holdout = load_holdout(metadata, "visits", "member", test_fraction=0.3, numeric="drop",
                           rng=np.random.default_rng(0), ledger=":memory:")
    assert holdout.attributes == ["day", "region_id"] and "uid" in holdout.train
    with pytest.raises(dpsql.ProgrammingError, match="privacy unit"):
        load_holdout(metadata, "visits", "member", test_fraction=0.3, attributes=["uid", "day"],
                     rng=np.random.default_rng(0), ledger=":memory:")


def test_randomized_response_publishes_no_uid_and_reports_the_heaviest_persons_epsilon(
        tmp_path) -> None:
    metadata = _dataset(tmp_path, _visits())
    holdout = _holdout(metadata)
    _, randomized = fit_randomized(holdout, RandomizationSpec(p=0.5),
                                   dpsql.RandomSource(insecure_seed=1), tmp_path)
    assert "uid" not in pd.read_parquet(randomized.data_path).columns
    args = ["-m", metadata, "-t", "visits", "--class", "member", "--attributes", "day,region_id",
            "--p0", "0.5", "--seed", "4", "--json", "--ledger", str(tmp_path / "l.sqlite")]
    out = json.loads(CliRunner().invoke(command, args, catch_exceptions=False).output)
    train = load_holdout(metadata, "visits", "member", test_fraction=0.3, attributes=ATTRIBUTES,
                         rng=np.random.default_rng(4), ledger=":memory:").train
    # a person's ε comes from the declared bound (L0 = 3 × L∞ = 2), not from the busiest
    # person's exact rows, which were published through it; the rows beyond it are dropped
    assert out["local_epsilon_per_unit"] == pytest.approx(6 * out["local_epsilon"])
    dropped = (train["uid"].value_counts() - 6).clip(lower=0).sum()
    assert dropped > 0 and out["scored on the true rows (not DP)"]["train_rows_dropped"] == dropped
    assert pd.read_parquet(randomized.data_path).shape[0] == len(holdout.train) - (
        holdout.train["uid"].value_counts() - 6).clip(lower=0).sum()


@pytest.mark.parametrize(("extra", "message"), [
    (["--attributes", "member"], "cannot also be a candidate"),
    (["--attributes", "day,day"], "given twice"),
    (["--attributes", "nope"], "no column 'nope'"),
    (["--attributes", "day", "--alpha", "-1"], "alpha must be >= 0")])
def test_bad_attributes_or_alpha_are_refused_before_the_rows_are_read(
        tmp_path, extra: list[str], message: str) -> None:
    """--attributes member (the class) was dropped from the model without a word, which then
    predicted from the class prior alone, and ε was charged for it; an unknown attribute and
    a negative --alpha were refused after the custodian's read was logged."""
    metadata = _dataset(tmp_path, _visits())
    ledger = str(tmp_path / "l.sqlite")
    args = ["-m", metadata, "-t", "visits", "--class", "member", *extra,
            "--mechanism", "laplace", "-e", "1", "--ledger", ledger]
    result = CliRunner().invoke(command, args)
    assert isinstance(result.exception, dpsql.ProgrammingError), result.output
    assert message in str(result.exception)
    with dpsql.connect(None, metadata=metadata, ledger=ledger) as connection:
        assert connection.ledger.history(connection.catalog.name) == []


def test_an_empty_test_split_is_answered_with_no_accuracy(tmp_path) -> None:
    """--test-fraction 1e-7 was charged ε 1 and answered test_accuracy NaN (not JSON), then
    refused by the count of rows drawn (one-sided); now the split is drawn person by person,
    the run charged and its accuracy on no test rows null."""
    metadata = _dataset(tmp_path, _visits())
    ledger = str(tmp_path / "l.sqlite")
    args = ["-m", metadata, "-t", "visits", "--class", "member", "--attributes", "day,region_id",
            "--mechanism", "laplace", "-e", "1", "--test-fraction", "1e-7", "--json",
            "--ledger", ledger]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    exact = out[EXACT]
    assert exact["test_rows"] == 0 and exact["test_accuracy"] is None
    assert exact["non_private_accuracy"] is None
    connection = dpsql.connect(None, metadata=metadata, ledger=ledger)
    try:
        assert connection.budget_spent.epsilon == 1
    finally:
        connection.close()


def test_randomized_response_says_it_charges_no_central_budget(tmp_path) -> None:
    """dpsql budget showed ε 0 after a randomized-response run, and its text output did not
    say why (cf's does): a user checking the ledger took the run for one that was not
    recorded."""
    metadata = _dataset(tmp_path, _visits())
    ledger = str(tmp_path / "l.sqlite")
    result = CliRunner().invoke(command, ["-m", metadata, "-t", "visits", "--class", "member",
                                          "--attributes", "day,region_id", "--seed", "0",
                                          "--ledger", ledger])
    assert result.exit_code == 0, result.output
    assert "no central budget is charged" in result.output
    with dpsql.connect(None, metadata=metadata, ledger=ledger) as connection:
        assert connection.budget_spent.epsilon == 0
        assert {row["kind"] for row in connection.ledger.history(connection.catalog.name)} == {
            "exact"}


def test_a_value_outside_the_declared_domain_is_left_out_of_the_exact_baseline(tmp_path):
    """One row whose day is outside the declared days failed the run on D′ alone (the exact
    baseline's counts held it, and the error quoted it), before anything was released."""
    frame = _visits()
    frame.loc[len(frame)] = {**frame.iloc[0].to_dict(), "day": "Priv'ate"}
    metadata = _dataset(tmp_path, frame, row_privacy=True)
    ledger = str(tmp_path / "l.sqlite")
    for seed in ("1", "2", "3"):  # the row lands in the training part in some of them
        result = CliRunner().invoke(command, [
            "-m", metadata, "-t", "visits", "--class", "member", "--attributes", "day,region_id",
            "--mechanism", "laplace", "-e", "1", "--seed", seed, "--json", "--ledger", ledger])
        assert result.exit_code == 0, result.output
