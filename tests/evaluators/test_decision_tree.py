"""DP decision trees grown from DP GROUP BY scripts (issue 5), on the real data sets."""

from __future__ import annotations

import json
import shlex
import sys
import warnings
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
import yaml
from click.testing import CliRunner
from conftest import require_dataset
from sqlglot import exp

import dpsql
import dpsql.catalog
from dpsql.cli import main
from evaluators.decision_tree import DPDecisionTree, DPRandomForest
from evaluators.decision_tree.attributes import (
    UNKNOWN,
    Attribute,
    equal_width_bins,
    equal_width_thresholds,
    schema_from_metadata,
)
from evaluators.decision_tree.budget import level_epsilon
from evaluators.decision_tree.cli import command
from evaluators.decision_tree.counts import EngineCounts
from evaluators.decision_tree.holdout import split_holdout
from evaluators.decision_tree.node import Node
from evaluators.decision_tree.split import debiased_gain, gain
from evaluators.experiments import decision_tree as experiment

METADATA = dpsql.catalog.PROJECT_ROOT / "data" / "datasets"




def _metadata(name: str, budget: float = 1e9) -> dict:
    """The repository metadata of ``name`` with a large budget (experiments and tests)."""
    require_dataset(f"{name}.csv")
    raw = yaml.safe_load((METADATA / f"{name}.yaml").read_text())
    raw["budget"] = {"epsilon": budget}
    for spec in raw["tables"].values():
        spec["source"] = str(dpsql.catalog.datasets_dir() / f"{name}.csv")
    return raw


def _connect(metadata: dict, ledger: str = ":memory:", seed: int = 0) -> dpsql.Connection:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
        return dpsql.connect(None, metadata=metadata, ledger=ledger, insecure_seed=seed)


@pytest.fixture(scope="module")
def car() -> dict:
    return _metadata("car")


@pytest.fixture(scope="module")
def car_rows(car) -> pd.DataFrame:
    custodian = dpsql.connect_custodian(None, metadata=car, ledger=":memory:")
    try:
        return custodian.cursor().execute('SELECT * FROM "car"').fetchdf()
    finally:
        custodian.close()


@pytest.fixture(scope="module")
def huge_epsilon_car(car, tmp_path_factory):
    """A depth-3 tree on Car at ε = 10⁶, with its ledger on disk and the spend around it."""
    ledger = str(tmp_path_factory.mktemp("ledger") / "car.sqlite")
    connection = _connect(car, ledger)
    before = connection.budget_spent.epsilon
    tree = DPDecisionTree(1e6, 3, criterion="info_gain", random_state=0)
    tree.fit(connection, car, "car", "class")
    after = connection.budget_spent.epsilon
    connection.close()
    return tree, before, after, ledger


# --- privacy accounting -------------------------------------------------------------------


def test_each_level_has_the_sensitivity_the_budget_split_assumes(huge_epsilon_car):
    tree, *_ = huge_epsilon_car
    splits, leaves = tree.levels[:-1], tree.levels[-1]
    assert [level.depth for level in splits] == [0, 1, 2] and leaves.depth is None
    for level in tree.levels:
        # one count table per statement, over disjoint nodes: sensitivity 1 each (add/remove)
        assert level.sensitivity == level.expected_sensitivity == level.statements
        assert level.sql.count("SELECT") == level.statements
    assert splits[0].statements == 1 + 6  # node × class, then the six Car attributes
    share = Fraction(10**6, 4)
    assert all(level.epsilon == share for level in splits)
    assert leaves.epsilon == Fraction(10**6) - 3 * share


def test_ledger_records_exactly_the_requested_epsilon(huge_epsilon_car):
    tree, before, after, ledger = huge_epsilon_car
    assert after - before == Fraction(10**6) == tree.epsilon_spent
    reopened = dpsql.connect(None, metadata=_metadata("car"), ledger=ledger)
    assert reopened.budget_spent.epsilon == Fraction(10**6)
    reopened.close()


def test_ledger_total_is_exact_for_a_decimal_epsilon_and_early_stop(car):
    connection = _connect(car, seed=1)
    tree = DPDecisionTree(0.3, 4, random_state=1).fit(connection, car, "car", "class")
    # Car is too small for four levels at ε = 0.3: growth stops early and the leaf script
    # takes the rest, so the ledger still grows by exactly 3/10.
    assert len(tree.levels) < 5
    assert connection.budget_spent.epsilon == Fraction(3, 10)
    connection.close()


def test_forest_on_disjoint_parts_costs_epsilon_once(car, tmp_path):
    holdout = split_holdout(car, "car", "class", test_fraction=0.3, directory=tmp_path, seed=0,
                            parts=3, budget=100, ledger=":memory:")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
        connection = dpsql.connect(str(holdout.train_database), metadata=holdout.train_metadata,
                                   ledger=":memory:", insecure_seed=0)
    forest = DPRandomForest(2.0, n_trees=3, max_depth=1, random_state=0)
    forest.fit(connection, holdout.train_metadata, "car", "class")
    assert connection.budget_spent.epsilon == 2
    assert len(forest.roots) == 3
    assert all(s.count('"tree_part"') == 1 for s in forest.levels[0].sql.split(";\n"))
    assert all(level.sensitivity == level.expected_sensitivity for level in forest.levels)
    assert forest.predict_proba(holdout.test).shape == (len(holdout.test), 4)
    connection.close()


def test_a_forest_picks_each_tree_by_its_partition_column_once(car, tmp_path):
    """Each WHEN of a forest's node CASE named the partition column (tree_part = i), and the
    engine's work per named column grew with the number of trees: a 1,000-tree forest took
    14 s, 10,000 trees hours. Now each statement names it once (the roots group by it), and
    every leaf still counts exactly its part's rows on its path."""
    holdout = split_holdout(car, "car", "class", test_fraction=0.3, directory=tmp_path, seed=0,
                            parts=4, budget=100, ledger=":memory:")
    custodian = dpsql.connect_custodian(str(holdout.train_database),
                                        metadata=holdout.train_metadata, ledger=":memory:")
    forest = DPRandomForest(1.0, n_trees=4, max_depth=2, random_state=0)
    forest.fit_exact(custodian, holdout.train_metadata, "car", "class")
    for level in forest.levels:
        assert all(s.count('"tree_part"') == 1 for s in level.sql.split(";\n")), level.sql
    assert forest.depth == 2
    for i, root in enumerate(forest.roots):
        for leaf in (node for node in root.walk() if node.is_leaf):
            where = " AND ".join((f'"tree_part" = {i}', *leaf.conditions))
            truth = dict(custodian.execute(f'SELECT "class", COUNT(*) FROM "car" WHERE {where} '
                                           'GROUP BY 1').fetchall())
            assert list(leaf.counts) == [truth.get(c, 0) for c in forest.classes]
    custodian.close()


def _wide_class_table(tmp_path, trees: int) -> tuple[dict, str]:
    """A table whose class declares 1,000 values (so a script counts at most 1,000 nodes),
    where b decides the class, four rows a tree; its metadata and DuckDB file."""
    database = str(tmp_path / "wide.duckdb")
    with duckdb.connect(database) as con:
        con.execute(f"CREATE TABLE t AS SELECT (i // {trees} % 2)::VARCHAR AS b, "
                    f"'c' || (i // {trees} % 2) AS c, (i % {trees})::INT AS tree_part "
                    f"FROM range({4 * trees}) r(i)")
    metadata = {"name": "wide", "budget": {"epsilon": 100}, "tables": {"t": {
        "privacy_unit": None, "columns": {
            "b": {"type": "text", "values": ["0", "1"]},
            "c": {"type": "text", "values": [f"c{i}" for i in range(1000)]},
            "tree_part": {"type": "int", "lower": 0, "upper": trees - 1}}}}}
    return metadata, database


def test_a_forest_keeps_every_script_within_what_the_engine_counts(tmp_path):
    """600 trees that all split on b made 1,200 leaves, whose 1.2 million node × class cells
    the engine refused (after the split level was charged). Now the b table is offered to the
    500 nodes a statement can count, and 400 of them split: 1,000 leaves, 100 splits withheld."""
    metadata, database = _wide_class_table(tmp_path, 600)
    custodian = dpsql.connect_custodian(database, metadata=metadata, ledger=":memory:")
    forest = DPRandomForest(1.0, n_trees=600, max_depth=1, random_state=0)
    forest.fit_exact(custodian, metadata, "t", "c")
    custodian.close()
    leaves = [node for root in forest.roots for node in root.walk() if node.is_leaf]
    assert len(leaves) == 1000 and forest.levels[0].withheld == 100


def test_cli_refuses_more_trees_than_a_script_counts_before_reading(tmp_path):
    """2,001 trees of a 1,000-class table: the custodian's read was logged, then the engine
    refused the first script (2 million cells). Now nothing is read or logged."""
    metadata, _ = _wide_class_table(tmp_path, 2001)
    (tmp_path / "wide.csv").write_text("b,c\n0,c0\n")
    metadata["tables"]["t"]["source"] = str(tmp_path / "wide.csv")
    del metadata["tables"]["t"]["columns"]["tree_part"]
    (tmp_path / "wide.yaml").write_text(yaml.safe_dump(metadata))
    ledger = tmp_path / "ledger.sqlite"
    result = CliRunner().invoke(command, [
        "--metadata", str(tmp_path / "wide.yaml"), "--table", "t", "--class", "c",
        "--trees", "2001", "--ledger", str(ledger)])
    assert isinstance(result.exception, dpsql.ProgrammingError), result.output
    assert "at most 1,000 trees" in result.exception.hint and not ledger.exists()


# --- correctness --------------------------------------------------------------------------


def test_huge_epsilon_tree_equals_non_private_id3_on_car(huge_epsilon_car, car, car_rows):
    tree, *_ = huge_epsilon_car
    custodian = dpsql.connect_custodian(None, metadata=car, ledger=":memory:")
    exact = DPDecisionTree(1e6, 3, criterion="info_gain").fit_exact(custodian, car, "car",
                                                                      "class")
    custodian.close()

    def shape(node: Node):
        return (node.split.name if node.split else None, [shape(c) for c in node.children])

    assert shape(tree.roots[0]) == shape(exact.roots[0])
    assert shape(exact.roots[0])[0] == "safety"  # the largest information gain on Car
    assert list(tree.predict(car_rows)) == list(exact.predict(car_rows))
    assert (exact.predict(car_rows) == car_rows["class"]).mean() == pytest.approx(0.819, abs=0.01)


def test_no_query_reads_thresholds_from_the_data():
    metadata = _metadata("adult")
    connection = _connect(metadata, seed=2)
    tree = DPDecisionTree(10.0, 2, attributes=["age", "hours-per-week", "sex"], random_state=2)
    tree.fit(connection, metadata, "adult", "salary-class")
    connection.close()
    bins = [a.bins for a in tree.schema.attributes if a.is_numeric]
    assert bins == [equal_width_bins(17, 90, 5, integer=True),
                    equal_width_bins(1, 99, 5, integer=True)]
    assert tree.roots[0].split is not None  # level 1 really carries a path predicate
    scaling = {float(v) for b in bins for v in (b.lower, b.count, b.span)}
    clamps = {0.0} | {float(b.count - 1) for b in bins}
    for script in tree.queries:
        for statement in sqlglot.parse(script, read="duckdb"):
            # a value's bin is FLOOR((x - lower) * count / span) clamped to 0 .. count - 1
            for floor in statement.find_all(exp.Floor):
                assert {float(v.this) for v in floor.find_all(exp.Literal)} <= scaling
            for clamp in statement.find_all(exp.Least, exp.Greatest):
                ends = [a for a in [clamp.this, *clamp.expressions] if isinstance(a, exp.Literal)]
                assert {float(v.this) for v in ends} <= clamps, clamp.sql()
            # and a path predicate compares a bin with a bin id
            for comparison in statement.find_all(exp.LT, exp.GTE, exp.GT, exp.LTE, exp.EQ):
                literal = comparison.expression
                if comparison.this.find(exp.Floor):
                    assert float(literal.this) in range(5), comparison.sql()
                else:
                    assert isinstance(comparison, exp.EQ), comparison.sql()
            # node ids and bin ids are CASE results; nothing else is a number
            assert not list(statement.find_all(exp.Min, exp.Max, exp.Quantile))


def test_cli_json_contract(car, tmp_path):
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump(car))
    result = CliRunner().invoke(command, [
        "--metadata", str(metadata), "--table", "car", "--class", "class", "--epsilon", "2",
        "--depth", "2", "--test-fraction", "0.3", "--seed", "4", "--insecure-seed", "4",
        "--ledger", str(tmp_path / "ledger.sqlite"), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert {"scored on the true rows (not DP)", "depth", "epsilon_spent", "queries"} <= set(out)
    # the row counts and accuracies on the true test rows are labelled exact, not DP
    exact = out["scored on the true rows (not DP)"]
    assert {"test_accuracy", "majority_accuracy", "train_rows"} <= set(exact)
    # each row held out with chance 0.3: 518 of 1,728 expected, 19 the standard deviation
    assert out["epsilon_spent"] == 2.0 and 440 < exact["test_rows"] < 600
    assert exact["test_rows"] + exact["train_rows"] == 1728
    assert 0.6 < exact["majority_accuracy"] < 0.8 and exact["test_accuracy"] >= 0.6
    assert sum(q["epsilon"] for q in out["queries"]) == pytest.approx(2.0)
    assert all("GROUP BY 1, 2" in q["sql"] for q in out["queries"])


def test_cli_refuses_an_unknown_class_column(car, tmp_path):
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump(car))
    result = CliRunner().invoke(command, [
        "--metadata", str(metadata), "--table", "car", "--class", "colour",
        "--ledger", ":memory:", "--json"])
    assert result.exit_code != 0
    assert isinstance(result.exception, dpsql.ProgrammingError)


def test_cli_refused_for_budget_reads_nothing(car, tmp_path):
    """A run the budget could not cover logged the custodian's read of the table (to split
    it), then said that nothing was run."""
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump({**car, "budget": {"epsilon": 1}}))
    ledger = tmp_path / "ledger.sqlite"
    result = CliRunner().invoke(command, [
        "--metadata", str(metadata), "--table", "car", "--class", "class", "--epsilon", "2",
        "--ledger", str(ledger), "--json"])
    assert isinstance(result.exception, dpsql.BudgetExhaustedError)
    with dpsql.connect(None, metadata=str(metadata), ledger=str(ledger)) as con:
        assert con.ledger.history(con.catalog.name) == []
    # a run that fits logs the custodian's read under its analyst
    result = CliRunner().invoke(command, [
        "--metadata", str(metadata), "--table", "car", "--class", "class", "--epsilon", "1",
        "--analyst", "bob", "--ledger", str(ledger), "--json"])
    assert result.exit_code == 0, result.output
    with dpsql.connect(None, metadata=str(metadata), ledger=str(ledger)) as con:
        assert {row["analyst"] for row in con.ledger.history(con.catalog.name)} == {"bob"}


# --- pure parts -------------------------------------------------------------------------


def test_gains_of_small_tables():
    table = np.array([[30.0, 0.0], [0.0, 10.0], [5.0, 5.0]])
    assert gain(table, "max") == 10.0
    assert gain(table, "gini") == pytest.approx(50 * (1 - (35 / 50) ** 2 - (15 / 50) ** 2) - 5.0)
    parent = -(0.7 * np.log2(0.7) + 0.3 * np.log2(0.3))
    assert gain(table, "info_gain") == pytest.approx(50 * parent - 10.0)
    assert gain(np.array([[4.0, 0.0], [8.0, 0.0]]), "info_gain") == 0.0  # pure node


def test_bias_correction_removes_the_large_domain_advantage():
    rng = np.random.default_rng(0)
    # 42 values, no signal: every child has the parent's 3:1 class mix.
    table = np.tile([75.0, 25.0], (42, 1))
    scale = 56.0
    raw, corrected = [], []
    for _ in range(40):
        noisy = table + rng.laplace(0.0, scale, size=table.shape)
        raw.append(gain(noisy, "max"))
        corrected.append(debiased_gain(noisy, "max", scale, rng))
    assert np.mean(raw) > 400  # noise alone looks like a strong split...
    assert abs(np.mean(corrected)) < 0.25 * np.mean(raw)  # ...until the bias is removed


@pytest.mark.parametrize("bins", [None, equal_width_bins(17, 90, 5, integer=True)])
def test_prediction_bins_match_the_sql_bins(bins):
    """Explicit thresholds (a CASE) and equal-width bins (a clamped FLOOR) alike."""
    attribute = Attribute("age", tuple(range(5)), equal_width_thresholds(17, 90, 5, integer=True),
                          bins)
    ages = pd.Series([17, 31, 32, 46, 60, 61, 75, 76, 90, None], dtype="Int64")
    frame = pd.DataFrame({"age": ages})
    database = duckdb.connect()
    database.register("frame", frame)
    in_sql = database.execute(f"SELECT {attribute.value_sql()} AS v FROM frame").df()["v"]
    expected = in_sql.fillna(UNKNOWN).astype(int).to_numpy()
    np.testing.assert_array_equal(attribute.encode(frame["age"]), expected)
    in_sql_predicates = [database.execute(f"SELECT count(*) FROM frame WHERE "
                                          f"{attribute.predicate_sql(i)}").fetchone()[0]
                         for i in range(attribute.size)]
    assert in_sql_predicates == [np.sum(expected == i) for i in range(attribute.size)]


def test_level_shares_add_up_exactly():
    total = Fraction(1, 10)
    for depth in range(7):
        assert depth * level_epsilon(total, depth) + level_epsilon(total, depth) == total


def test_inverse_variance_combination():
    node = Node(depth=0, conditions=(), candidates=())
    node.absorb(np.array([10.0, 20.0]), 4.0)
    node.absorb(np.array([14.0, 16.0]), 12.0)
    np.testing.assert_allclose(node.counts, [11.0, 19.0])
    assert node.variance == pytest.approx(3.0)


def test_schema_refuses_attributes_without_public_domain():
    metadata = {"tables": {"t": {"privacy_unit": None, "columns": {
        "y": {"type": "text", "values": ["a", "b"]}, "free": {"type": "text"},
        "x": {"type": "int", "lower": 0, "upper": 9}}}}}
    schema = schema_from_metadata(metadata, "t", "y")
    assert [a.name for a in schema.attributes] == ["x"]  # 'free' has no domain: skipped
    with pytest.raises(dpsql.ProgrammingError):
        schema_from_metadata(metadata, "t", "y", attributes=["free"])
    with pytest.raises(dpsql.ProgrammingError):
        DPDecisionTree(1.0, 2, criterion="entropy")


def test_cli_another_split_is_charged_not_answered_from_the_first(car, tmp_path):
    """Secure noise reuses answers, but only on the same data: --seed 2 trains on another
    split under the same table name, so it is charged in full (it once printed ε spent 0)."""
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump(car))
    spent = []
    for seed in ("1", "2"):
        result = CliRunner().invoke(command, [
            "--metadata", str(metadata), "--table", "car", "--class", "class",
            "--epsilon", "1", "--depth", "1", "--seed", seed,
            "--ledger", str(tmp_path / "ledger.sqlite"), "--json"])
        assert result.exit_code == 0, result.output
        spent.append(json.loads(result.output)["epsilon_spent"])
    assert spent == [1.0, 1.0]


def _invoke(monkeypatch, args: list[str]):
    """``dpsql ARGS`` in process; the CLI reads --json from the command line it was given."""
    monkeypatch.setattr(sys, "argv", ["dpsql", *args])
    return CliRunner().invoke(main, args)


def test_cli_refuses_a_tree_whose_epsilon_exceeds_what_is_left_before_any_charge(
        car, tmp_path, monkeypatch):
    """With ε = 3.5 left, a tree of ε = 6 was charged its first level (ε = 3), refused the
    second and reported epsilon_spent 0; it is now refused whole, before any script."""
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump({**car, "budget": {"epsilon": 3.5}}))
    ledger = tmp_path / "ledger.sqlite"
    result = _invoke(monkeypatch, [
        "evaluate", "tree", "-m", str(metadata), "-t", "car", "-e", "6", "--class", "class",
        "--depth", "1", "--ledger", str(ledger), "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stderr)
    assert error["code"] == "budget_exhausted" and error["epsilon_spent"] == 0.0
    assert "Requested: ε=6" in error["error"] and "Remaining: ε=3.5" in error["error"]
    connection = dpsql.connect(None, metadata=str(metadata), ledger=str(ledger))
    assert connection.budget_spent.epsilon == 0
    connection.close()


def test_a_later_refusal_reports_what_the_earlier_levels_were_charged(car, tmp_path,
                                                                      monkeypatch):
    """Another analyst spends the budget between two levels: the refusal of the second one
    carries the ε the first was charged, which stays spent."""
    ledger = str(tmp_path / "ledger.sqlite")
    metadata = {**car, "budget": {"epsilon": 4}}
    release = EngineCounts.release
    calls = []

    def interleaved(self, *args, **kwargs):
        if calls:
            other = _connect(metadata, ledger)
            other.cursor().execute("SELECT COUNT(*) FROM car", epsilon=1.5)
            other.close()
        calls.append(1)
        return release(self, *args, **kwargs)

    monkeypatch.setattr(EngineCounts, "release", interleaved)
    connection = _connect(metadata, ledger)
    with pytest.raises(dpsql.BudgetExhaustedError) as refused:
        DPDecisionTree(4, 1, random_state=0).fit(connection, metadata, "car", "class")
    assert refused.value.epsilon_spent == 2
    assert connection.budget_spent.epsilon == 2 + Fraction(3, 2)
    connection.close()


def test_cli_refuses_an_unknown_excluded_column_and_lists_the_columns(car, tmp_path,
                                                                       monkeypatch):
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump(car))
    result = _invoke(monkeypatch, [
        "evaluate", "tree", "-m", str(metadata), "-t", "car", "--class", "class",
        "--exclude", "nope", "--ledger", str(tmp_path / "ledger.sqlite"), "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stderr)
    assert error["code"] == "unknown_column" and "'nope'" in error["error"]
    assert "safety" in error["hint"]
    # refused before the custodian's read of the table (it was logged, then refused)
    with dpsql.connect(None, metadata=str(metadata), ledger=str(tmp_path / "ledger.sqlite")) as con:
        assert con.ledger.history(con.catalog.name) == []


@pytest.mark.parametrize("fraction, empty", [("0.0000001", "test_accuracy"),
                                             ("0.9999999", "majority_accuracy")])
def test_cli_answers_a_split_with_an_empty_side(car, tmp_path, fraction, empty):
    """The split is drawn row by row (person by person), so either side may be empty; a
    refusal decided on the count of rows drawn was one-sided (500 rows refused, 501
    answered): now the run is answered and charged, its accuracy on no rows null (not NaN,
    which is not JSON; 0.9999999 crashed with an IndexError)."""
    metadata = tmp_path / "car.yaml"
    metadata.write_text(yaml.safe_dump(car))
    ledger = str(tmp_path / "ledger.sqlite")
    result = CliRunner().invoke(command, [
        "--metadata", str(metadata), "--table", "car", "--class", "class", "--epsilon", "1",
        "--test-fraction", fraction, "--seed", "3", "--ledger", ledger, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["scored on the true rows (not DP)"][empty] is None
    assert out["epsilon_spent"] == 1.0


def test_the_reproduction_scores_a_setting_alike_in_both_sweeps(tmp_path, monkeypatch):
    """Car, split 0, information gain at ε 1 and depth 3 is in the ε sweep and the depth sweep
    of the reproduction: its fits shared one connection seeded with the split, so each drew
    what the fits before it had left of the stream, and it scored 0.7046 in one sweep and
    0.7278 in the other. Each fit now has its own connection, seeded alike."""
    require_dataset("car.csv")
    monkeypatch.setattr(experiment, "DIFFPRIVLIB_PYTHON", str(tmp_path / "no-diffprivlib"))
    car = next(d for d in experiment.DATASETS if d.name == "car")
    plan = experiment.Plan(reps=1, epsilons=(0.1, 1.0), other_criteria_epsilons=(),
                           depths=(1, 3), depth_reps=1, forest_epsilons=(), criteria=())
    rows = pd.DataFrame(experiment._one_split(car, experiment.split(car, 0, tmp_path), 0, plan))
    same = rows[(rows["model"] == experiment.DP_MODEL) & (rows["epsilon"] == 1.0)
                & (rows["depth"] == 3)]
    assert sorted(same["sweep"]) == ["sweep_depth", "sweep_epsilon"]
    figures = same[["accuracy", "grown_depth", "scripts"]].drop_duplicates()
    assert len(figures) == 1, same
    # the command the report prints for a setting scores what the reproduction scored
    monkeypatch.chdir(dpsql.catalog.PROJECT_ROOT)
    line = experiment.cli_command(car, 1.0, 3, 0)
    result = CliRunner().invoke(command, shlex.split(line)[3:] + ["--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output[result.output.index("{"):])
    assert payload["scored on the true rows (not DP)"]["test_accuracy"] == figures["accuracy"].iloc[0]
    assert payload["depth"] == figures["grown_depth"].iloc[0]


def test_the_reports_tree_command_parses_to_the_protocol():
    """The report's command is the protocol (it was not: the CLI's default depth was 5, the
    report's 3, and its Adult tree split on the sampling weight fnlwgt, which the protocol
    excludes)."""
    adult = experiment.DATASETS[0]
    line = experiment.cli_command(adult, experiment.FULL.depth_epsilon,
                                  experiment.FULL.sweep_depth, 0)
    assert line in (dpsql.catalog.PROJECT_ROOT / "docs" / "reports" / "decision_tree"
                    / "README.md").read_text()
    params = command.make_context("tree", shlex.split(line)[3:]).params
    assert (params["epsilon"], params["depth"], params["test_fraction"]) == (1.0, 3, 0.3)
    assert params["exclude"] == ("fnlwgt", "education-num") == adult.exclude
    assert (params["criterion"], params["trees"], params["seed"], params["insecure_seed"]) == (
        "info_gain", 1, 0, 0)
    # what the reproduction leaves at DPDecisionTree's defaults, the CLI's defaults must be
    tree = DPDecisionTree(1.0)
    assert (params["selection"], params["bins"]) == (tree.settings.selection,
                                                     tree.schema_options["numeric_bins"])
    assert command.make_context("tree", ["-m", line.split()[4], "-t", "adult", "--class",
                                         "salary-class"]).params["depth"] == 3


def test_the_report_is_generated_from_its_results_with_no_typed_numbers():
    """The committed README predated per-fit connections and its reading was typed: it said
    Car stays at the majority rate up to ε = 1 and Mushroom drops to 0.945 at depth 6, where
    the rerun grows Car trees at ε = 1 (0.718) and keeps Mushroom at 0.987. --replot of the
    committed results.csv and run.json now rebuilds README.md byte for byte."""
    folder = dpsql.catalog.PROJECT_ROOT / "docs" / "reports" / "decision_tree"
    results = pd.read_csv(folder / "results.csv").drop_duplicates()
    cost = json.loads((folder / "run.json").read_text())
    readme = experiment._markdown(results, cost)
    assert readme == (folder / "README.md").read_text()
    assert "nan" not in readme and "What changed since the previous run" in readme


def test_a_quick_report_leaves_out_the_full_runs_reading():
    """A quick run's README said "this report is a full rerun" and read its few numbers with
    the full run's typed verdicts and run time. run.json now records a quick run, and its
    README says so and leaves those sections out."""
    folder = dpsql.catalog.PROJECT_ROOT / "docs" / "reports" / "decision_tree"
    results = pd.read_csv(folder / "results.csv").drop_duplicates()
    cost = {**json.loads((folder / "run.json").read_text()), "quick": True}
    readme = experiment._markdown(results[results["rep"] == 0], cost)
    assert "QUICK RUN" in readme and "full rerun" not in readme
    assert "Reading the numbers" not in readme and "the full run took" not in readme


# --- generated SQL against tables whose columns are named like its aliases -------------------


def _alias_named_table(tmp_path) -> tuple[dict, str]:
    """A table whose columns are named like every alias the tree's SQL gives its outputs
    (node, v, c, n): raw values with no public domain as v and n, the class c decided by node."""
    database = str(tmp_path / "aliases.duckdb")
    with duckdb.connect(database) as con:
        con.execute("CREATE TABLE t AS SELECT (i % 2)::VARCHAR AS node, i * 0.37 AS v, "
                    "'k' || (i % 2) AS c, i AS n FROM range(200) r(i)")
    metadata = {"name": "aliases", "budget": {"epsilon": 1e9}, "tables": {"t": {
        "privacy_unit": None, "columns": {
            "node": {"type": "text", "values": ["0", "1"]},
            "v": {"type": "float", "lower": 0, "upper": 80},
            "c": {"type": "text", "values": ["k0", "k1"]},
            "n": {"type": "int", "lower": 0, "upper": 199}}}}}
    return metadata, database


def test_a_column_named_like_an_output_alias_is_not_grouped_in_its_place(tmp_path):
    """CM1 has a column v: `GROUP BY node, v, c` grouped its raw floats, not the public bins
    aliased v, and the engine refused the script ('the GROUP BY key 'v' has no public
    domain'). GROUP BY now names its keys by position."""
    metadata, database = _alias_named_table(tmp_path)
    connection = dpsql.connect(database, metadata=metadata, ledger=":memory:", insecure_seed=0)
    tree = DPDecisionTree(1e6, max_depth=2, random_state=0).fit(connection, metadata, "t", "c")
    assert tree.roots[0].split.name == "node"  # node decides the class
    assert connection.budget_spent.epsilon == pytest.approx(1e6)


def test_cli_grows_a_tree_on_cm1_whose_column_v_is_named_like_an_alias(monkeypatch):
    """The researcher's command, refused before the fix."""
    require_dataset("cm1.csv")
    result = _invoke(monkeypatch, [
        "evaluate", "tree", "-m", str(METADATA / "cm1.yaml"), "-t", "cm1", "--class",
        "defects", "-e", "1", "--ledger", ":memory:", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["epsilon_spent"] == 1


def test_cli_refuses_more_bins_than_a_key_has_public_values_before_reading(tmp_path, monkeypatch):
    """--bins 10,001 was sent to the engine, which took the bins for a private key and hinted
    at a δ; it is now refused from the metadata, with the limit."""
    metadata, database = _alias_named_table(tmp_path)
    with duckdb.connect(database) as con:
        con.execute(f"COPY t TO '{tmp_path / 't.csv'}' (HEADER)")
    metadata["tables"]["t"]["source"] = str(tmp_path / "t.csv")
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(metadata))
    result = _invoke(monkeypatch, [
        "evaluate", "tree", "-m", str(tmp_path / "t.yaml"), "-t", "t", "--class", "c",
        "-e", "1", "--bins", str(dpsql.MAX_DOMAIN_VALUES + 1), "--ledger", ":memory:"])
    assert result.exit_code == 1 and "use at most 10,000 bins" in result.output, result.output
    assert schema_from_metadata(metadata, "t", "c", numeric_bins=dpsql.MAX_DOMAIN_VALUES)
