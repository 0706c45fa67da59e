"""``dpsql evaluate naive-bayes``: hold-out accuracy of Naive Bayes under local or central DP.

The data owner splits the table into train and test rows. Then either

* ``randomized-response`` (local DP, Zhang et al. 2007): the train rows are randomized record by
  record (ERRPH for categorical attributes, TRR or ERRPH-over-public-bins for numeric ones, the
  class in the clear), written as a public table, and PPNB is reconstructed from exact GROUP BY
  queries on it through a ``dpsql`` connection. ERRPH keeps a value with ``--p0``, or, given
  ``--epsilon``, the record's local ε is split equally over the attributes and each one's p0 is
  the largest with that share (``equal_split_spec``; numeric attributes then in public bins,
  since TRR has no finite ε), as in part C of ``evaluators.experiments.naive_bayes_rr``; or
* ``laplace`` (central DP): a ``dpsql`` connection on the private train rows releases the noisy
  contingency tables of ``train_central`` for ε.

The test rows are classified on their true values. The helpers below are shared with the
reproduction script ``evaluators.experiments.naive_bayes_rr``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import secrets
import tempfile
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np
import pandas as pd
import yaml

import dpsql
from dpsql.budget import positive
from dpsql.catalog import load_catalog
from dpsql.randomize import (
    ERRPH,
    RandomizationSpec,
    RandomizedTable,
    bound_units,
    column_document,
    csprng,
    load_randomization,
    randomize_frame,
    read_source,
    unit_bound,
    write_data,
    write_randomized,
)
from evaluators import _catalog
from evaluators._budget import require_budget
from evaluators._cli import EXACT, dataset_ledger, emit, evaluator_options
from evaluators._domains import domain_labels, value_codes
from evaluators._holdout import check_test_fraction, held_out, share, shown_share
from evaluators.attribute_selection.contingency import catalog_attributes, check_candidates
from evaluators.attribute_selection.contingency import release_tables
from evaluators.naive_bayes.central import model_from_release
from evaluators.naive_bayes.model import NaiveBayesModel, check_alpha
from evaluators.naive_bayes.randomized_response import ReconstructedStatistics, train_randomized

if TYPE_CHECKING:  # catalogue types only annotate; evaluators use load_catalog's objects
    from dpsql.catalog import ColumnSpec, TableSpec

MECHANISMS = ("randomized-response", "laplace")
NUMERIC_HANDLING = ("trr", "bins", "drop")
#: ERRPH's p0 when neither --p0 nor --epsilon is given
DEFAULT_P0 = 0.5


@dataclasses.dataclass(frozen=True)
class Holdout:
    """A train/test split of one table, restricted to the modelled attributes and the class.

    Attributes:
        table: the table's declared columns after restriction (binned numeric columns are
            declared as text with their bin labels as values), with its privacy unit column
            (never modelled) and contribution bounds.
        class_column: the label.
        train, test: the rows.
    """

    table: TableSpec
    class_column: str
    train: pd.DataFrame
    test: pd.DataFrame

    @property
    def attributes(self) -> list[str]:
        """The modelled attributes, in declaration order."""
        return [c for c in self.table.columns
                if c != self.class_column and not _is_unit(self.table, c)]

    @property
    def modelled(self) -> TableSpec:
        """The table without its privacy unit column: what randomized response publishes."""
        return dataclasses.replace(self.table, columns={
            n: c for n, c in self.table.columns.items() if not _is_unit(self.table, n)})

    @property
    def numeric_attributes(self) -> list[str]:
        """Attributes modelled as Gaussian (numeric without a value domain)."""
        return [c for c in self.attributes if self.table.columns[c].values is None]


def load_holdout(metadata: str | Path, table: str, class_column: str, *,
                 test_fraction: float, rng: np.random.Generator,
                 attributes: list[str] | None = None, numeric: str = "trr",
                 bins: int = 5, analyst: str | None = None,
                 ledger: str | None = None) -> Holdout:
    """Read a catalogue table, pick attributes, handle numeric ones, split at random.

    Args:
        numeric: ``trr`` keeps numeric columns (Gaussian, randomized with TRR), ``bins``
            replaces each by its public equal-width bins over the declared bounds (categorical,
            finite local ε), ``drop`` leaves them out.
        analyst, ledger: who reads the true rows, and where that read is logged as exact
            (default: the OS user, in the dataset's ledger beside the metadata).
    """
    check_test_fraction(test_fraction)
    if numeric not in NUMERIC_HANDLING:
        raise dpsql.ProgrammingError(f"numeric handling must be one of {NUMERIC_HANDLING}")
    spec = _catalog.table(metadata, table)
    target = _catalog.class_column(spec, class_column)
    names = attributes or [c for c in spec.columns
                           if c != target.name and not _is_unit(spec, c)]
    check_candidates(names, target.name)
    modelled_units = [n for n in (*names, target.name) if _is_unit(spec, n)]
    if modelled_units:
        raise dpsql.ProgrammingError(
            f"{modelled_units[0]!r} is the privacy unit of table {spec.name!r}: it names "
            "people, so it is neither an attribute nor the class",
            hint="leave it out of --attributes and --class")
    columns = {name: _attribute_spec(spec, name) for name in names}  # before the read
    if numeric == "bins":  # --bins 0 or past MAX_DOMAIN_VALUES: refused before the read
        catalog_attributes(metadata, table, target.name,
                           [n for n, c in columns.items() if c.values is None], bins)
    frame = read_source(metadata, table, analyst=analyst, ledger=ledger)
    if numeric == "drop":
        columns = {n: c for n, c in columns.items() if c.values is not None}
    elif numeric == "bins":
        numeric_names = [n for n, c in columns.items() if c.values is None]
        for binned in catalog_attributes(metadata, table, target.name, numeric_names, bins)[0]:
            frame[binned.name] = binned.encode(frame[binned.name]).astype(object)
            columns[binned.name] = categorical_column(columns[binned.name], binned.domain)
    columns[target.name] = target
    if spec.privacy_unit is not None:
        # the central counts bound each person's rows by this column
        unit = spec.column(spec.privacy_unit)
        columns[unit.name] = unit
    frame = frame[list(columns)]
    test = held_out(frame, spec.privacy_unit and spec.column(spec.privacy_unit).name,
                    test_fraction, rng)
    restricted = dataclasses.replace(spec, columns=columns)
    return Holdout(restricted, target.name, frame[~test].reset_index(drop=True),
                   frame[test].reset_index(drop=True))


def _raw_budget(metadata: str | Path) -> Any:
    """The ``budget`` entry of a metadata file, as written (exact, not through floats)."""
    raw = yaml.safe_load(Path(metadata).read_text())
    return raw.get("budget") if isinstance(raw, dict) else None


def _is_unit(table: TableSpec, name: str) -> bool:
    unit = table.privacy_unit
    return unit is not None and name.lower() == unit.lower()


def table_document(table: TableSpec, source: str | Path) -> dict[str, Any]:
    """``table`` as the catalogue YAML mapping of a copy of its rows at ``source``.

    The privacy declaration (public, privacy unit, contribution bounds) is carried with the
    columns: a copy declared row-private would give each count a sensitivity of one row while
    one person may hold many.
    """
    doc: dict[str, Any] = {"source": str(source), "public": table.public,
                           "privacy_unit": table.privacy_unit}
    if table.privacy_unit is not None:
        doc.update(max_groups_per_unit=table.max_groups_per_unit,
                   max_rows_per_group=table.max_rows_per_group)
        if table.max_rows_per_unit is not None:
            doc["max_rows_per_unit"] = table.max_rows_per_unit
    doc["columns"] = {n: column_document(c) for n, c in table.columns.items()}
    return doc


def categorical_column(column: ColumnSpec, values: tuple[str, ...]) -> ColumnSpec:
    """The same column declared as text over public ``values`` (bins or a binarization)."""
    return dataclasses.replace(column, type="text", lower=None, upper=None, values=tuple(values))


def _attribute_spec(table: TableSpec, name: str) -> ColumnSpec:
    column = table.column(name)
    if column is None:
        raise dpsql.UnknownColumnError(f"table {table.name!r} has no column {name!r}",
                                       hint=f"columns are {sorted(table.columns)}")
    if column.values is None and not column.is_numeric:
        raise dpsql.ProgrammingError(
            f"attribute {name!r} has no public domain and is not numeric",
            hint="declare its values in the metadata, or leave it out of --attributes")
    return column


def fit_exact(holdout: Holdout, alpha: float = 1.0) -> NaiveBayesModel:
    """Non-private Naive Bayes from the exact train statistics (sample variances, ddof=1).

    Values and classes are matched to their declared domains value by value (``value_codes``):
    a value outside its domain, or missing, is left out, as the DP counts leave it (kept, it
    failed the run on D′ alone, quoting the person's value: adversary round L).
    """
    train = holdout.train
    classes = _class_labels(holdout, train)
    class_counts = {c: float(n) for c, n in classes.value_counts().sort_index().items()}
    feature_counts, domains, gaussian = {}, {}, {}
    for name in holdout.attributes:
        values = holdout.table.columns[name].values
        if values is None:
            grouped = train[name].astype(float).groupby(classes)
            gaussian[name] = {str(c): (float(m), float(v)) for c, m, v in
                              zip(grouped.mean().index, grouped.mean(), grouped.var(ddof=1),
                                  strict=True)}
            continue
        domains[name] = list(values)
        codes = pd.Series(value_codes(train[name], values), index=train.index)
        kept = (codes >= 0) & classes.notna()
        counts = codes[kept].groupby([codes[kept], classes[kept]]).size()
        feature_counts[name] = {(values[code], c): float(n) for (code, c), n in counts.items()}
    return ReconstructedStatistics(class_counts, feature_counts, domains, gaussian).to_model(alpha)


def _class_labels(holdout: Holdout, rows: pd.DataFrame) -> pd.Series:
    """Each row's class as the model names it (None if missing or undeclared)."""
    return domain_labels(rows[holdout.class_column],
                         holdout.table.columns[holdout.class_column].values)


def fit_randomized(holdout: Holdout, spec: RandomizationSpec, rng: dpsql.RandomSource,
                   workdir: str | Path, alpha: float = 1.0) -> tuple[NaiveBayesModel,
                                                                      RandomizedTable]:
    """Randomize the train rows (class kept clear), at most the declared bound per person
    (``bound_units``), and fit PPNB through a dpsql connection."""
    spec = dataclasses.replace(spec, keep=(holdout.class_column,))
    table = holdout.modelled
    randomizers = spec.build(table, rng)
    train, dropped = bound_units(holdout.train, holdout.table, rng)
    randomized = write_randomized(randomize_frame(train, randomizers, rng), table, randomizers,
                                  Path(workdir) / f"{holdout.table.name}_randomized.parquet",
                                  dropped)
    # the randomized table is public: its exact queries are charged nothing
    connection = dpsql.connect(None, metadata=str(randomized.metadata_path), ledger=":memory:")
    try:
        model = train_randomized(connection, holdout.table.name, holdout.class_column,
                                 load_randomization(randomized.parameters_path), alpha=alpha)
    finally:
        connection.close()
    return model, randomized


def train_metadata(holdout: Holdout, source: str | Path, epsilon: float,
                   dataset: str | Path | None = None) -> dict[str, Any]:
    """The catalogue of the train rows written at ``source``, for ``fit_central``.

    With ``dataset`` it has the dataset's name, budget, neighbouring and mechanism (the train
    rows are the same people); without, a throw-away budget of exactly ``epsilon``. The table
    keeps its privacy unit and contribution bounds (``table_document``).
    """
    metadata: dict[str, Any] = {"name": f"{holdout.table.name}_train",
                                "budget": {"epsilon": float(epsilon)}}
    if dataset is not None:
        catalog = load_catalog(dataset)
        metadata.update(name=catalog.name, budget=_raw_budget(dataset),
                        neighbouring=catalog.neighbouring, mechanism=catalog.mechanism)
    metadata["tables"] = {holdout.table.name: table_document(holdout.table, source)}
    return metadata


def fit_central(holdout: Holdout, epsilon: float, workdir: str | Path, *,
                insecure_seed: int | None = None, alpha: float = 1.0,
                dataset: str | Path | None = None, analyst: str | None = None,
                ledger: str | None = None) -> tuple[NaiveBayesModel, float]:
    """Central-DP Naive Bayes (``train_central``) on the private train rows; returns ε spent.

    Numeric attributes must have been binned or dropped (``load_holdout(numeric=...)``).
    With ``dataset`` (the metadata file the rows come from) the release is charged to
    ``analyst`` in that dataset's ledger (``ledger``, default the dataset's own) and budget,
    under its name and neighbouring, like every other evaluator: the train rows are the same
    people. Without it (reproductions on throw-away copies) the ledger is a throw-away one with
    a budget of exactly ε. Either way the train copy keeps the table's privacy unit and
    contribution bounds (``train_metadata``), so each count's sensitivity is per person.
    """
    if holdout.numeric_attributes:
        raise dpsql.ProgrammingError(
            f"central DP Naive Bayes needs categorical attributes; "
            f"{holdout.numeric_attributes} are numeric",
            hint="use --numeric bins (public bins) or --numeric drop")
    source = Path(workdir) / f"{holdout.table.name}_train.parquet"
    write_data(holdout.train, source)
    metadata = train_metadata(holdout, source, epsilon, dataset)
    book = ":memory:" if dataset is None else dataset_ledger(dataset, ledger)
    connection = dpsql.connect(None, metadata=metadata, analyst=analyst, ledger=book,
                               insecure_seed=insecure_seed)
    try:
        # what this release was charged (the cursor's): the dataset's growth between two
        # reads of the ledger also counted other analysts' releases
        candidates, classes = catalog_attributes(metadata, holdout.table.name,
                                                 holdout.class_column, holdout.attributes)
        release = release_tables(connection, holdout.table.name, holdout.class_column,
                                 candidates, classes, epsilon, with_class_count=True)
        model = model_from_release(release, alpha=alpha)
        spent = float(release.epsilon_spent)
    finally:
        connection.close()
    return model, spent


def accuracy(model: NaiveBayesModel, holdout: Holdout) -> float | None:
    """Share of test rows whose predicted class is the true one."""
    predicted = model.predict(holdout.test[holdout.attributes])
    return share(predicted == _class_labels(holdout, holdout.test).to_numpy())


def equal_split_spec(holdout: Holdout, epsilon: float) -> RandomizationSpec:
    """ERRPH per attribute with ε/d each, so the record's local ε is exactly ``epsilon``."""
    share = epsilon / len(holdout.attributes)
    return RandomizationSpec(column_p={
        name: ERRPH.from_epsilon(holdout.table.columns[name].values, share).p0
        for name in holdout.attributes})


def _epsilon_or_none(epsilon: float) -> float | None:
    return None if math.isinf(epsilon) else epsilon


def _epsilon_per_unit(holdout: Holdout, per_record: float) -> float | None:
    """A person's local ε: each publishes at most the table's declared bound of records
    (``unit_bound``), each randomized independently, so the losses add up (None without a
    privacy unit, or if infinite)."""
    bound = unit_bound(holdout.table)
    return None if bound is None else _epsilon_or_none(bound * per_record)


def evaluate(metadata: str, table: str, class_column: str, mechanism: str, *,
             p0: float | None, epsilon: float | None, test_fraction: float, seed: int | None,
             attributes: list[str] | None, numeric: str, bins: int,
             trr: dict[str, float], alpha: float, insecure_seed: int | None = None,
             analyst: str | None = None, ledger: str | None = None) -> dict[str, Any]:
    """One hold-out run; the JSON object of the command.

    ``seed`` fixes the split and, unless ``insecure_seed`` is given, the noise too (both then
    give no privacy); ``insecure_seed`` alone fixes only the noise. Under randomized response
    ``epsilon`` is the record's local ε (``equal_split_spec``), an alternative to ``p0``.
    The data owner's read and any central charge go to ``analyst`` in ``ledger`` (default:
    the dataset's).
    """
    if mechanism not in MECHANISMS:
        raise dpsql.ProgrammingError(f"mechanism must be one of {MECHANISMS}")
    check_alpha(alpha)  # before the rows are read (the read was logged, then refused)
    if mechanism == "laplace" and epsilon is None:
        raise dpsql.PrivacyParameterError("--mechanism laplace needs --epsilon",
                                          hint="pass e.g. --epsilon 1.0")
    if epsilon is not None:  # before it is split: -1 was refused as its share, -0.1667
        positive(epsilon, "epsilon")
    if mechanism == "laplace":  # before the custodian's read is logged, as tree and anonymize do
        with dpsql.connect(None, metadata=metadata, analyst=analyst,
                           ledger=dataset_ledger(metadata, ledger)) as dataset:
            require_budget(dataset, Fraction(str(epsilon)))
    if p0 is not None and (epsilon is not None or mechanism == "laplace"):
        raise dpsql.PrivacyParameterError(
            "--p0 is randomized response's parameter; with --epsilon it would be ignored",
            hint="give --epsilon (the local ε per record under randomized-response, the "
            "central ε under laplace) or --p0, not both")
    ledger = dataset_ledger(metadata, ledger)
    # the split is the data owner's sampling, not noise: a numpy generator; the randomizers
    # draw from a RandomSource (the CSPRNG, or seeded and warning for experiments)
    split = np.random.default_rng(seed if seed is not None else secrets.randbits(128))
    if insecure_seed is None:
        insecure_seed = seed
    noise = (csprng() if insecure_seed is None
             else dpsql.RandomSource(insecure_seed=insecure_seed))
    # made before the rows are read: TRR parameters that would publish them are refused first
    spec = None if epsilon is not None or mechanism == "laplace" else RandomizationSpec(
        p=DEFAULT_P0 if p0 is None else p0, trr_a_mean=trr["a_mean"],
        trr_a_variance=trr["a_variance"], trr_b_variance=trr["b_variance"])
    if epsilon is not None and numeric == "trr":
        # central counts need public domains for every attribute, and TRR has no finite ε
        numeric = "bins"
    holdout = load_holdout(metadata, table, class_column, test_fraction=test_fraction, rng=split,
                           attributes=attributes, numeric=numeric, bins=bins, analyst=analyst,
                           ledger=ledger)
    exact = {"train_rows": len(holdout.train), "test_rows": len(holdout.test),
             "non_private_accuracy": accuracy(fit_exact(holdout, alpha), holdout)}
    result: dict[str, Any] = {
        "table": table, "class": holdout.class_column, "mechanism": mechanism,
        "attributes": holdout.attributes, "numeric": numeric, EXACT: exact,
    }
    with tempfile.TemporaryDirectory(prefix="dpsql-nb-") as workdir:
        if mechanism == "laplace":
            model, spent = fit_central(holdout, epsilon, workdir, insecure_seed=insecure_seed,
                                       alpha=alpha, dataset=metadata, analyst=analyst,
                                       ledger=ledger)
            exact["test_accuracy"] = accuracy(model, holdout)
            result["epsilon_spent"] = spent
            return result
        spec = spec or equal_split_spec(holdout, epsilon)
        model, randomized = fit_randomized(holdout, spec, noise, workdir, alpha)
    per_attribute = randomized.local_epsilon_per_attribute
    exact.update(test_accuracy=accuracy(model, holdout),
                 train_rows_dropped=randomized.rows_dropped)
    result.update(
        p0=None if epsilon is not None else spec.p,
        p0_per_attribute={a: r.p0 for a, r in randomized.randomizers.items()
                          if isinstance(r, ERRPH)},
        local_epsilon=_epsilon_or_none(randomized.local_epsilon_per_record),
        local_epsilon_per_unit=_epsilon_per_unit(holdout, randomized.local_epsilon_per_record),
        local_epsilon_categorical=_epsilon_or_none(randomized.local_epsilon_categorical),
        local_epsilon_per_attribute={a: _epsilon_or_none(e) for a, e in per_attribute.items()},
        unprotected_columns=list(randomized.clear_columns),
        epsilon_spent=0.0,
    )
    return result


@click.command("naive-bayes")
@evaluator_options(table_help="Table to learn from.",
                   epsilon_help="ε of the central (laplace) release; under randomized-response "
                   "the local ε per record, split equally over the attributes (instead of --p0).",
                   seed_help="Reproducible split, randomization and noise (experiments only: "
                   "no privacy); --insecure-seed alone fixes only the noise.")
@click.option("--class", "class_column", required=True, help="Class column (kept in the clear).")
@click.option("--mechanism", type=click.Choice(MECHANISMS), default="randomized-response",
              show_default=True, help="Local randomized response, or central Laplace counts.")
@click.option("--p0", type=float, default=None,
              help=f"ERRPH: probability of releasing the true value (default {DEFAULT_P0}; "
              "below 1, which would publish the true values).")
@click.option("--attributes", default=None, help="Comma-separated attributes (default: all).")
@click.option("--numeric", type=click.Choice(NUMERIC_HANDLING), default="trr", show_default=True,
              help="Numeric attributes: TRR (Gaussian), public bins + ERRPH, or drop (bins "
              "for trr with --epsilon).")
@click.option("--bins", type=int, default=5, show_default=True, help="Bins per numeric column.")
@click.option("--trr-a-mean", type=float, default=1.0, show_default=True)
@click.option("--trr-a-variance", type=float, default=1.0, show_default=True)
@click.option("--trr-b-variance", type=float, default=1.0, show_default=True)
@click.option("--alpha", type=float, default=1.0, show_default=True, help="Laplace smoothing.")
@click.option("--test-fraction", type=float, default=0.3, show_default=True)
def command(metadata: str, table: str, epsilon: float | None, output: str | None,
            seed: int | None, insecure_seed: int | None, as_json: bool, analyst: str | None,
            ledger: str | None, class_column: str, mechanism: str, p0: float | None,
            attributes: str | None, numeric: str, bins: int,
            trr_a_mean: float, trr_a_variance: float, trr_b_variance: float, alpha: float,
            test_fraction: float) -> None:
    """Naive Bayes under randomized response (local DP) or noisy counts (central DP)."""
    result = evaluate(
        metadata, table, class_column, mechanism, p0=p0, epsilon=epsilon,
        test_fraction=test_fraction, seed=seed,
        attributes=attributes.split(",") if attributes else None, numeric=numeric, bins=bins,
        trr={"a_mean": trr_a_mean, "a_variance": trr_a_variance, "b_variance": trr_b_variance},
        alpha=alpha, insecure_seed=insecure_seed, analyst=analyst, ledger=ledger)
    emit(result, as_json=as_json, output=output, text=functools.partial(_print, mechanism, table))


def _print(mechanism: str, table: str, result: dict) -> None:
    exact = result[EXACT]
    click.echo(f"{mechanism} Naive Bayes on {table!r} ({exact['train_rows']} train, "
               f"{exact['test_rows']} test rows: exact, non-private)")
    click.echo(f"test accuracy: {shown_share(exact['test_accuracy'])} (non-private model: "
               f"{shown_share(exact['non_private_accuracy'])}; both exact, on the true test rows)")
    if mechanism == "laplace":
        click.echo(f"ε spent: {result['epsilon_spent']:g}")
    else:
        local = result["local_epsilon"]
        # TRR columns make the record's ε infinite; the categorical ones' part is still finite
        shown = f"{local:.4f}" if local is not None else (
            f"infinite (TRR on numeric columns; categorical columns "
            f"{result['local_epsilon_categorical']:.4f})")
        click.echo(f"local ε per record: {shown}; unprotected: "
                   f"{', '.join(result['unprotected_columns'])}")
        # as cf says: dpsql budget shows 0 spent (and the custodian's logged read)
        click.echo("no central budget is charged: each record is randomized before release")
        if result["local_epsilon_per_unit"] is not None:
            click.echo(f"local ε per person (at most the declared bound of rows each; "
                       f"{exact['train_rows_dropped']} train rows beyond it dropped, exact): "
                       f"{result['local_epsilon_per_unit']:.4f}")
