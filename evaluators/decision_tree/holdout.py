"""Train/test split done by the data custodian, so that the analyst's DP connection sees only
the training rows.

Evaluating a classifier needs labelled test rows, which is custodian work: the split reads the
table through ``dpsql.connect_custodian`` (logged in the ledger as a non-private access),
writes the training part to a private temporary DuckDB file (a real table, so the engine does
not re-parse a CSV for every statement) and returns that file with metadata for a DP
connection. The test rows stay with the custodian for scoring. Nothing is written into
the repository.
"""

from __future__ import annotations

import copy
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import yaml

import dpsql
from dpsql.randomize import read_source
from evaluators._holdout import check_test_fraction, held_out, parts_of
from evaluators.decision_tree.attributes import quote_identifier
from evaluators.decision_tree.forest import PARTITION_COLUMN


@dataclass(frozen=True)
class Holdout:
    """A custodian-made split: metadata of the training table, the test rows, the majority."""

    train_metadata: dict
    train_database: Path
    train_rows: int
    test: pd.DataFrame
    train_majority: object
    directory: Path


def load_metadata(metadata: str | Path | Mapping) -> dict:
    """The metadata as a plain dict (a deep copy; the caller's dict is never changed)."""
    if isinstance(metadata, Mapping):
        return copy.deepcopy(dict(metadata))
    return yaml.safe_load(Path(metadata).read_text())


def split_holdout(metadata: str | Path | Mapping, table: str, target: str, *,
                  test_fraction: float, directory: Path, seed: int | None = None,
                  parts: int = 1, budget: float | None = None,
                  ledger: str | None = None, analyst: str | None = None) -> Holdout:
    """Split ``table`` into training and test rows as its custodian.

    Args:
        metadata: YAML path or dict of the dataset.
        table: the table to split.
        target: the class column (for the training majority class).
        test_fraction: the chance that a person's rows (a row, without a privacy unit) are
            held out for testing, in (0, 1) (``_holdout.held_out``).
        directory: where the training database is written (a private temporary folder).
        seed: seed of the random split (default: CSPRNG).
        parts: when > 1, add a public column ``tree_part`` assigning each training row at
            random to one of ``parts`` disjoint parts (for a forest).
        budget: replace the metadata's ε budget (experiments use a large one).
        ledger: ledger of the custodian's read (default: the engine's default).
        analyst: who the read is logged under (default: decision-tree-holdout).

    Raises:
        dpsql.ProgrammingError: test_fraction is outside (0, 1), or the table or the class
            column is unknown.
    """
    check_test_fraction(test_fraction)
    raw = load_metadata(metadata)
    spec = next((s for name, s in raw.get("tables", {}).items() if name.lower() == table.lower()),
                None)
    if spec is None:
        raise dpsql.ProgrammingError(f"table {table!r} is not in the metadata",
                                     hint=f"use one of {sorted(raw.get('tables', {}))}")
    if target not in spec.get("columns", {}):
        raise dpsql.ProgrammingError(f"table {table!r} has no column {target!r}",
                                     hint=f"use one of {sorted(spec.get('columns', {}))}")
    rows = _read_as_custodian(metadata, table, ledger, analyst)
    rng = np.random.default_rng(seed if seed is not None else secrets.randbits(128))
    unit = spec.get("privacy_unit")
    if unit is not None:  # the column's own spelling: the metadata may write it in another case
        unit = next((c for c in rows.columns if c.lower() == str(unit).lower()), unit)
    test_mask = held_out(rows, unit, test_fraction, rng)
    test = rows[test_mask].reset_index(drop=True)
    train = rows[~test_mask].reset_index(drop=True)
    columns = copy.deepcopy(spec.get("columns", {}))
    if parts > 1:
        train[PARTITION_COLUMN] = parts_of(train, unit, parts, rng)
        columns[PARTITION_COLUMN] = {"type": "int", "lower": 0, "upper": parts - 1}
    database = Path(directory) / f"{table}_train.duckdb"
    with duckdb.connect(str(database)) as out:
        out.register("train_rows", train)
        out.execute(f"CREATE OR REPLACE TABLE {quote_identifier(table)} AS "
                    "SELECT * FROM train_rows")
    train_spec = {key: value for key, value in spec.items()
                  if key not in ("csv", "rows", "source")}
    train_spec["columns"] = columns
    raw["tables"] = {table: train_spec}
    raw.setdefault("name", Path(str(metadata)).stem if not isinstance(metadata, Mapping)
                   else "dataset")
    if budget is not None:
        raw["budget"] = {"epsilon": budget, "delta": raw.get("budget", {}).get("delta", 1e-6)}
    return Holdout(train_metadata=raw, train_database=database, train_rows=len(train), test=test,
                   train_majority=next(iter(train[target].mode()), None), directory=Path(directory))


def _read_as_custodian(metadata: str | Path | Mapping, table: str, ledger: str | None,
                       analyst: str | None) -> pd.DataFrame:
    # logged under the run's analyst (it was always "decision-tree-holdout")
    return read_source(metadata, table, analyst=analyst or "decision-tree-holdout",
                       ledger=ledger)


def temporary_directory() -> tempfile.TemporaryDirectory:
    """A private temporary folder for training databases (removed when closed)."""
    return tempfile.TemporaryDirectory(prefix="dpsql-tree-")
