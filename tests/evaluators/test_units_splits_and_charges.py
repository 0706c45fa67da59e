"""Units, splits and charges in the evaluators (adversary round 28z).

- The custodian's train/test split (``held_out``) and a forest's parts (``parts_of``) were drawn
  person by person in order of first appearance: one person whose rows came first re-drew every
  other person's side (857 of 2000 moved), so D and D′ trained on far more than one person apart.
- The local-DP ratings of collaborative filtering published a fractional rating's fraction
  exactly (3.5 + integer noise) and a NULL or NaN rating as NaN.
- A ``privacy_unit`` spelled in another case than its column ('UID' for uid) was randomized and
  published by ``dpsql randomize``, and made ``dpsql evaluate tree`` fail with a KeyError.
- The tree's exponential split choice took the release's ε, 0 when the engine answered a level
  again from the ledger, instead of the level's share: the choice was then uniform.
- Another analyst's release while a tree grew failed the fit with an InternalError.
- ``naive-bayes --mechanism laplace`` logged the custodian's read of the rows, then refused the
  release for budget.

Round 29l: ``naive-bayes --mechanism laplace`` reported the dataset's growth during its fit
(another analyst's release too) as its ε, and logged the custodian's read before refusing a bad
``--bins``; ``attribute-selection --db`` charged a ledger beside the metadata while ``dpsql run
--db`` and ``dpsql budget --db`` charged and showed one beside the database (two budgets);
``dpsql anonymize`` raised a bare TypeError for a NULL beside a value missing from its hierarchy.
"""

from __future__ import annotations

import json
from fractions import Fraction

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import dpsql
import evaluators.decision_tree.grow as grow_module
from dpsql.randomize import RandomizationSpec, randomize_table
from evaluators._holdout import held_out, parts_of
from evaluators.collaborative_filtering.data import fetch_long, open_ratings
from evaluators.collaborative_filtering.pipeline import Perturbation, release_values
from evaluators.decision_tree import cli as tree_cli
from evaluators.decision_tree.counts import EngineCounts
from evaluators.decision_tree.holdout import PARTITION_COLUMN, split_holdout
from evaluators.decision_tree.tree import DPDecisionTree
from evaluators.naive_bayes import cli as nb_cli

CLASS = {"type": "int", "values": [0, 1]}
LEVELS = {"type": "int", "values": [1, 2, 3]}


def _labelled(rows: int, seed: int) -> pd.DataFrame:
    """Attribute a predicts the class c; b is noise."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 2, rows)
    return pd.DataFrame({"a": np.where(rng.random(rows) < 0.9, c + 1, 3),
                         "b": rng.integers(1, 4, rows), "c": c})


def _write(folder, frame: pd.DataFrame, unit: str | None, epsilon: float = 100) -> dict:
    """Write ``frame`` to ``folder``/t.csv and return its metadata (and t.yaml beside it)."""
    frame.to_csv(folder / "t.csv", index=False)
    columns = {name: LEVELS for name in ("a", "b") if name in frame}
    columns["c"] = CLASS
    table = {"source": str(folder / "t.csv"), "privacy_unit": unit}
    if unit is not None:
        # bounded, so the id would be a numeric attribute if it were not known as the unit
        columns = {"uid": {"type": "int", "lower": 0, "upper": 99999}, **columns}
        table.update(max_groups_per_unit=1, max_rows_per_group=3)
    table["columns"] = columns
    meta = {"name": "t", "budget": {"epsilon": epsilon}, "tables": {"t": table}}
    (folder / "t.yaml").write_text(yaml.safe_dump(meta))
    return meta


def _people(count: int) -> pd.DataFrame:
    """``count`` people with two rows each (uid, a, b, c)."""
    return _labelled(count * 2, 1).assign(uid=np.repeat(np.arange(count), 2))


ADDED = pd.DataFrame({"uid": [99999] * 2, "a": [1, 2], "b": [3, 3], "c": [1, 1]})


def _sides(folder, frame: pd.DataFrame) -> pd.DataFrame:
    """Each person's side (a row in test: -1) or training part, from a split with a fixed seed."""
    meta = _write(folder, frame, "uid")
    holdout = split_holdout(meta, "t", "c", test_fraction=0.3, directory=folder, seed=7,
                            parts=3, ledger=":memory:")
    with duckdb.connect(str(holdout.train_database)) as con:
        train = con.execute(f"SELECT uid, {PARTITION_COLUMN} AS side FROM t").df()
    test = pd.DataFrame({"uid": holdout.test["uid"], "side": -1})
    return pd.concat([train, test]).drop_duplicates().set_index("uid")["side"].sort_index()


@pytest.mark.parametrize("draw", [
    lambda frame, rng: held_out(frame, "uid", 0.3, rng),
    lambda frame, rng: parts_of(frame, "uid", 3, rng)], ids=["held_out", "parts_of"])
def test_a_person_added_first_changes_no_other_persons_draw(draw):
    """With one seed, each row of D keeps its draw in D′ = (one more person's rows) + D."""
    frame = _people(600)
    drawn = draw(frame, np.random.default_rng(7))
    drawn_prime = draw(pd.concat([ADDED, frame], ignore_index=True), np.random.default_rng(7))
    assert len(set(drawn)) > 1
    np.testing.assert_array_equal(drawn_prime[len(ADDED):], drawn)


def test_a_person_added_first_moves_no_other_person_between_sides_or_parts(tmp_path):
    """``dpsql evaluate tree``'s split with a fixed seed: D′ = D plus one person whose rows come
    first, and every other person keeps their side and their training part (for a forest)."""
    frame = _people(600)
    (tmp_path / "d").mkdir(), (tmp_path / "d_prime").mkdir()
    sides = _sides(tmp_path / "d", frame)
    sides_prime = _sides(tmp_path / "d_prime", pd.concat([ADDED, frame], ignore_index=True))
    assert sides.index.is_unique and len(sides) == 600
    assert set(sides) == {-1, 0, 1, 2}
    pd.testing.assert_series_equal(sides_prime.drop(99999), sides)


def test_local_dp_ratings_are_integers_whatever_was_rated(tmp_path):
    """Half stars, NULL, NaN and ±inf ratings are released as integer levels plus integer
    noise: no output shows a fraction or a missing value."""
    ratings = ["3.5", "4.5", "", "nan", "inf", "-inf", "0.25", "7.75", "4"]
    lines = [f"{1 + k // 3}\t{1 + k % 3}\t{r}\t880000000" for k, r in enumerate(ratings)]
    (tmp_path / "u.data").write_text("\n".join(lines) + "\n")
    meta = {"name": "ml", "budget": {"epsilon": 10}, "tables": {"ratings": {
        "source": str(tmp_path / "u.data"), "privacy_unit": "user", "max_groups_per_unit": 8,
        "max_rows_per_group": 300, "csv": {"delimiter": "\t", "header": False,
                                            "names": ["user", "item", "rating", "timestamp"]},
        "columns": {"user": "int", "item": {"type": "int", "lower": 1, "upper": 3},
                    "rating": {"type": "float", "lower": 1, "upper": 5}, "timestamp": "int"}}}}
    custodian = open_ratings(meta, ledger=":memory:")
    try:
        read = fetch_long(custodian.duckdb, "cf_ratings", "rating")["rating"]
        assert read.isna().sum() == 2 and np.isinf(read).sum() == 2  # the file reads as written
        for seed in range(5):
            release_values(custodian.duckdb, Perturbation("ldp", epsilon=1.0),
                           dpsql.RandomSource(insecure_seed=seed))
            noisy = fetch_long(custodian.duckdb, "cf_ldp_noisy", "noisy")["noisy"].to_numpy()
            assert len(noisy) == len(ratings)
            assert np.isfinite(noisy).all() and (noisy == np.round(noisy)).all(), noisy
    finally:
        custodian.close()


def test_a_unit_spelled_in_another_case_is_not_randomized_or_published(tmp_path):
    """privacy_unit 'UID' names the column uid: randomize leaves it out as it does for 'uid'."""
    frame = pd.DataFrame({"uid": [1001, 1001, 2002, 3003], "a": [1, 2, 1, 3], "c": [0, 1, 0, 1]})
    meta = _write(tmp_path, frame, "UID")
    result = randomize_table(meta, "t", tmp_path / "out.csv", RandomizationSpec(p=0.5),
                             rng=dpsql.RandomSource(insecure_seed=1), ledger=":memory:")
    assert sorted(result.randomizers) == ["a", "c"]
    assert list(pd.read_csv(tmp_path / "out.csv").columns) == ["a", "c"]


def test_tree_evaluates_a_table_whose_unit_is_spelled_in_another_case(tmp_path):
    """`dpsql evaluate tree` on privacy_unit 'UID' (column uid) splits by person and grows on
    a and b, not on the id."""
    frame = _labelled(300, 2).assign(uid=np.arange(300))
    _write(tmp_path, frame, "UID")
    result = CliRunner().invoke(tree_cli.command, [
        "-m", str(tmp_path / "t.yaml"), "-t", "t", "--class", "c", "-e", "1", "--seed", "3",
        "--json", "--ledger", str(tmp_path / "ledger.sqlite")])
    assert result.exit_code == 0, (result.output, result.exception)
    queries = json.loads(result.output)["queries"]
    assert queries and not any("uid" in query["sql"].lower() for query in queries)


def test_exponential_choice_keeps_the_level_share_when_the_answer_is_reused(tmp_path,
                                                                            monkeypatch):
    """A second identical fit is answered from the ledger (ε spent 0), yet its exponential
    choice is drawn with the same ε as the first fit's, not with 0 (a uniform draw)."""
    seen: list[float] = []
    real_choose = grow_module.choose

    def recording_choose(gains, **kwargs):
        seen.append(kwargs["epsilon"])
        return real_choose(gains, **kwargs)

    monkeypatch.setattr(grow_module, "choose", recording_choose)
    meta = _write(tmp_path, _labelled(2000, 3), None)
    runs = []
    for _ in range(2):
        seen.clear()
        with dpsql.connect(None, metadata=meta, ledger=str(tmp_path / "ledger.sqlite")) as con:
            tree = DPDecisionTree(2.0, max_depth=1, selection="exponential", random_state=1)
            tree.fit(con, meta, "t", "c")
        runs.append((list(seen), tree.epsilon_spent))
    (first, first_spent), (second, second_spent) = runs
    assert first_spent == 2 and second_spent == 0  # the second fit's counts were reused
    assert first and all(epsilon > 0 for epsilon in first)
    assert second == first


def test_another_analysts_release_during_a_fit_fails_nothing(tmp_path, monkeypatch):
    """Bob queries the dataset after each of Alice's levels: her fit succeeds and the ledger
    holds for her exactly the tree's epsilon_spent."""
    meta = _write(tmp_path, _labelled(2000, 4), None)
    ledger = str(tmp_path / "ledger.sqlite")
    real_release = EngineCounts.release
    with dpsql.connect(None, metadata=meta, ledger=ledger, analyst="bob") as bob:

        def release_then_bob(self, *args, **kwargs):
            released = real_release(self, *args, **kwargs)
            bob.execute("SELECT COUNT(*) FROM t", epsilon=0.5).fetchall()
            return released

        monkeypatch.setattr(EngineCounts, "release", release_then_bob)
        with dpsql.connect(None, metadata=meta, ledger=ledger, analyst="alice") as alice:
            tree = DPDecisionTree(1.0, max_depth=2, random_state=0).fit(alice, meta, "t", "c")
            history = alice.ledger.history()
    charged = [Fraction(row["epsilon"]) for row in history]
    alice_charged = [Fraction(row["epsilon"]) for row in history if row["analyst"] == "alice"]
    assert tree.epsilon_spent == 1 and sum(alice_charged) == tree.epsilon_spent
    assert sum(charged) > sum(alice_charged)  # bob's releases went in between


def test_naive_bayes_laplace_refuses_for_budget_before_reading_the_rows(tmp_path):
    """--mechanism laplace -e 5 on a budget of 1: BudgetExhaustedError, and no custodian's
    read ('exact') in the ledger."""
    _write(tmp_path, _labelled(300, 5), None, epsilon=1)
    ledger = str(tmp_path / "ledger.sqlite")
    result = CliRunner().invoke(nb_cli.command, [
        "-m", str(tmp_path / "t.yaml"), "-t", "t", "--class", "c", "--mechanism", "laplace",
        "-e", "5", "--ledger", ledger, "--json"])
    assert isinstance(result.exception, dpsql.BudgetExhaustedError), result.exception
    with dpsql.connect(None, metadata=str(tmp_path / "t.yaml"), ledger=ledger) as con:
        assert "exact" not in [row["kind"] for row in con.ledger.history()]


def test_naive_bayes_reports_its_own_charge_only(tmp_path, monkeypatch):
    """Bob's release while alice's model was fitted was counted in alice's epsilon_spent."""
    _write(tmp_path, _labelled(300, 5), None)
    meta, ledger = str(tmp_path / "t.yaml"), str(tmp_path / "ledger.sqlite")
    real = nb_cli.release_tables

    def release_then_bob(*args, **kwargs):
        release = real(*args, **kwargs)
        with dpsql.connect(None, metadata=meta, ledger=ledger, analyst="bob") as bob:
            bob.execute("SELECT COUNT(*) AS n FROM t", epsilon=0.5).fetchall()
        return release

    monkeypatch.setattr(nb_cli, "release_tables", release_then_bob)
    result = CliRunner().invoke(nb_cli.command, [
        "-m", meta, "-t", "t", "--class", "c", "--mechanism", "laplace", "-e", "1",
        "--analyst", "alice", "--ledger", ledger, "--json"], catch_exceptions=False)
    reported = json.loads(result.output.splitlines()[-1])["epsilon_spent"]
    with dpsql.connect(None, metadata=meta, ledger=ledger) as con:
        alice = sum(Fraction(row["epsilon"]) for row in con.ledger.history()
                    if row["kind"] == "dp" and row["analyst"] == "alice")
    assert reported == 1 == alice


@pytest.mark.parametrize("bins", ["0", "1000000"])
def test_naive_bayes_refuses_bad_bins_before_reading_the_rows(tmp_path, bins):
    _write(tmp_path, _labelled(300, 5).assign(x=np.arange(300)), None)
    meta = yaml.safe_load((tmp_path / "t.yaml").read_text())
    meta["tables"]["t"]["columns"]["x"] = {"type": "int", "lower": 0, "upper": 299}
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(meta))
    ledger = str(tmp_path / "ledger.sqlite")
    result = CliRunner().invoke(nb_cli.command, [
        "-m", str(tmp_path / "t.yaml"), "-t", "t", "--class", "c", "--mechanism", "laplace",
        "-e", "1", "--numeric", "bins", "--bins", bins, "--ledger", ledger])
    assert isinstance(result.exception, dpsql.Error), result.exception
    with dpsql.connect(None, metadata=str(tmp_path / "t.yaml"), ledger=ledger) as con:
        assert con.ledger.history() == []


def test_attribute_selection_on_a_database_charges_the_ledger_run_charges(tmp_path,
                                                                         monkeypatch):
    """`dpsql run --db` spent the whole budget beside the database; attribute-selection --db
    then spent it again beside the metadata, and `dpsql budget --db` never showed it. Both
    charge the ledger beside the database now."""
    from evaluators.attribute_selection import cli as selection_cli

    frame = _labelled(300, 5)
    with duckdb.connect(str(tmp_path / "data.duckdb")) as con:
        con.execute("CREATE TABLE t AS SELECT * FROM frame")
    meta = _write(tmp_path, frame, None, epsilon=1)
    del meta["tables"]["t"]["source"]
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(meta))
    monkeypatch.chdir(tmp_path)
    with dpsql.connect("data.duckdb", metadata="t.yaml") as con:
        con.execute("SELECT COUNT(*) AS n FROM t", epsilon=1).fetchall()
    result = CliRunner().invoke(selection_cli.command, [
        "-m", "t.yaml", "-t", "t", "--db", "data.duckdb", "--class", "c", "-e", "1"])
    assert isinstance(result.exception, dpsql.BudgetExhaustedError), result.output
