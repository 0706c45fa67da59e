"""``dpsql evaluate tree``: grow a DP tree on a custodian-made training split and score it."""

from __future__ import annotations

import time
import warnings
from fractions import Fraction
from pathlib import Path

import click

import dpsql
from evaluators._budget import require_budget
from evaluators._cli import EXACT, dataset_ledger, emit, evaluator_options
from evaluators._domains import value_codes
from evaluators._holdout import share, shown_share
from evaluators.decision_tree.attributes import schema_from_metadata
from evaluators.decision_tree.forest import DPRandomForest, check_trees
from evaluators.decision_tree.holdout import split_holdout, temporary_directory
from evaluators.decision_tree.split import CRITERIA, SELECTIONS
from evaluators.decision_tree.sql import max_nodes
from evaluators.decision_tree.tree import DPDecisionTree


@click.command(name="tree")
@evaluator_options(epsilon_default=1.0, epsilon_help="Total ε of the tree.",
                   seed_help="Seed of the train/test split and of split-choice randomness (the "
                   "noise stays cryptographic unless --insecure-seed is given).")
@click.option("--class", "target", required=True, help="The class column (declared values).")
@click.option("--depth", type=click.IntRange(min=0), default=3, show_default=True,
              help="Number of split levels (3, the report's ε sweep).")
@click.option("--test-fraction", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.3, show_default=True, help="Share of rows the custodian holds out.")
@click.option("--criterion", type=click.Choice(CRITERIA), default="info_gain", show_default=True)
@click.option("--selection", type=click.Choice(SELECTIONS), default="noisy_argmax",
              show_default=True)
@click.option("--bins", type=click.IntRange(min=2), default=5, show_default=True,
              help="Equal-width public bins of numeric columns over their declared bounds.")
@click.option("--exclude", multiple=True, help="Column not to split on (repeatable).")
@click.option("--trees", type=click.IntRange(min=1), default=1, show_default=True,
              help="More than 1: a random forest of trees on disjoint parts (same total ε); "
              "at most the nodes one script counts (10,000 on Adult, fewer with many classes).")
@click.option("--show-tree", is_flag=True, help="Print the tree (text output only).")
def command(metadata: str, table: str, epsilon: float, output: str | None, seed: int | None,
            insecure_seed: int | None, as_json: bool, analyst: str | None, ledger: str | None,
            target: str, depth: int, test_fraction: float, criterion: str, selection: str,
            bins: int, exclude: tuple[str, ...], trees: int, show_tree: bool) -> None:
    """Grow an ε-DP decision tree (DiffP-ID3) from DP GROUP BY scripts and report its accuracy.

    The custodian splits the table; the tree sees the training part only through a dpsql
    connection, one script per level, and the ledger is checked to have grown by exactly ε.
    """
    ledger = dataset_ledger(metadata, ledger)
    options = {"criterion": criterion, "selection": selection, "numeric_bins": bins,
               "exclude": exclude, "random_state": seed}
    model = (DPRandomForest(epsilon, n_trees=trees, max_depth=depth, **options) if trees > 1
             else DPDecisionTree(epsilon, max_depth=depth, **options))
    # before the custodian reads the rows to split them: a run the budget cannot cover, or
    # an unknown --exclude, logged that read, then said nothing was run
    schema = schema_from_metadata(metadata, table, target, exclude=exclude, numeric_bins=bins)
    if trees > 1:
        check_trees(trees, schema)
    with dpsql.connect(None, metadata=metadata, analyst=analyst, ledger=ledger) as dataset:
        require_budget(dataset, Fraction(str(epsilon)))
    with temporary_directory() as directory:
        holdout = split_holdout(metadata, table, target, test_fraction=test_fraction,
                                directory=Path(directory), seed=seed, parts=trees,
                                ledger=ledger, analyst=analyst)
        with warnings.catch_warnings():
            if as_json:  # keep stdout one JSON object; the seed's warning is in the output
                warnings.simplefilter("ignore", dpsql.InsecureRandomnessWarning)
            connection = dpsql.connect(str(holdout.train_database),
                                       metadata=holdout.train_metadata, analyst=analyst,
                                       ledger=ledger, insecure_seed=insecure_seed)
        try:
            started = time.perf_counter()
            model.fit(connection, holdout.train_metadata, table, target)
            fit_seconds = time.perf_counter() - started
        finally:
            connection.close()
    # classes matched by value, never through column text: one NULL among the test rows'
    # int classes made them '1.0', which no predicted '1' equalled (accuracy 0)
    truth = value_codes(holdout.test[target], model.classes)
    majority = value_codes([holdout.train_majority], model.classes)[0]
    result = {
        EXACT: {
            "test_accuracy": share(value_codes(model.predict(holdout.test), model.classes)
                                   == truth),
            "majority_accuracy": None if holdout.train_majority is None else
            share((truth == majority) & (truth >= 0)),
            "train_rows": holdout.train_rows,
            "test_rows": len(holdout.test),
        },
        "depth": model.depth,
        "max_depth": depth,
        "epsilon_spent": float(model.epsilon_spent),
        "criterion": criterion,
        "selection": selection,
        "trees": trees,
        # splits chosen but not made: their children would pass what one script counts
        "splits_withheld": sum(level.withheld for level in model.levels),
        "fit_seconds": round(fit_seconds, 3),
        "noise": "insecure (seeded, NOT private)" if insecure_seed is not None else "cryptographic",
        "queries": [{"sql": level.sql, "epsilon": float(level.epsilon),
                     "sensitivity": float(level.sensitivity),
                     "level": "leaves" if level.depth is None else level.depth}
                    for level in model.levels],
    }

    def text(result: dict) -> None:
        exact = result[EXACT]
        click.echo(f"test accuracy {shown_share(exact['test_accuracy'])} (majority class "
                   f"{shown_share(exact['majority_accuracy'])}; both exact, non-private, on the "
                   f"custodian's test rows); depth {result['depth']}; "
                   f"ε spent {result['epsilon_spent']:g} in {len(model.levels)} scripts; "
                   f"fit {fit_seconds:.2f} s")
        if result["splits_withheld"]:
            click.echo(f"{result['splits_withheld']:,} splits not made: a level script counts "
                       f"at most {max_nodes(schema):,} nodes")
        if show_tree:
            click.echo(model.render())

    emit(result, as_json=as_json, output=output, text=text)

