"""Attribute x class contingency tables as one DP SQL script (Var & İnan, §5.1).

Every candidate attribute A becomes ``SELECT A, class, COUNT(*) ... GROUP BY A, class``; all of
them go to the engine as ONE script, so the engine computes the joint sensitivity (one record
sits in one cell of every table: k tables have sensitivity k under add/remove, 2k under
replace) and charges one ε for the lot. Domains come from the metadata, never from the data:
text attributes use their declared ``values``; numeric attributes are cut into public
equal-width bins over the declared [lower, upper] by one clamped FLOOR expression
(``evaluators._bins``), whose whole numbers the engine treats as a public domain and zero-fills.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

import dpsql
from evaluators import _catalog
from evaluators._bins import EqualWidthBins
from evaluators._domains import domain_labels, value_codes

DEFAULT_BINS = 5


@dataclass(frozen=True)
class Attribute:
    """One attribute of a contingency table: the SQL that yields its value, and its domain.

    Attributes:
        name: the column name in the table.
        domain: the public values as text (bin labels for a binned numeric column).
        bins: for a binned numeric column, its bins (the SQL key is the bin index, whose
            label is ``domain[index]``).
        values: the declared values, in the order of their labels in ``domain``, that a
            column's values are matched to (default: the labels; a column of bools matches
            the declared False and True, not their labels 'False' and 'True').
    """

    name: str
    domain: tuple[str, ...]
    bins: EqualWidthBins | None = None
    values: tuple | None = None

    @property
    def key(self) -> str:
        """The SQL expression of the group key (the column, or its bin index)."""
        column = quote(self.name)
        return column if self.bins is None else self.bins.sql(column)

    @property
    def declared(self) -> tuple:
        """The values a column's values are matched to: ``values``, else the labels."""
        return self.domain if self.values is None else self.values

    def key_codes(self, keys: pd.Series) -> np.ndarray:
        """Each released key's index in ``domain``, -1 outside it: a binned column's key is
        its bin index; another's is matched to the declared values by value (a timestamp key
        matched no declared '2020-01-01T00:00:00' as text, after the charge)."""
        return value_codes(keys, self.declared if self.bins is None else range(len(self.domain)))

    def encode(self, values: pd.Series) -> pd.Series:
        """Map raw column values to domain labels exactly as the SQL key does (NaN stays NaN;
        so does a value outside the domain, which GROUP BY on the public domain leaves out).

        Values are matched value by value (``value_codes``), never through the column's
        text: one NULL among ints made every value '1.0', which matched no label.

        Example:
            >>> Attribute("a", ("1", "2")).encode(pd.Series([1.0, 2.0, None])).tolist()
            ['1', '2', <NA>]
        """
        if self.bins is None:
            return domain_labels(values, self.declared, self.domain).astype("string")
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
        indices = self.bins.index(numbers)
        known = ~np.isnan(indices)
        labels = np.full(len(numbers), None, dtype=object)
        labels[known] = np.asarray(self.domain, dtype=object)[indices[known].astype(int)]
        return pd.Series(labels, index=values.index, dtype="string")


@dataclass(frozen=True)
class ContingencyRelease:
    """The noisy tables of one script release.

    Attributes:
        tables: attribute -> counts of shape (|domain|, |classes|), rows in domain order.
        attributes: attribute -> its Attribute (domain, bins).
        classes: the class labels, in column order.
        class_counts: the class-count statement's noisy counts, if it was part of the script.
        sensitivity: the script's L1 sensitivity as the engine reported it.
        epsilon_spent: ε charged for the whole script (0 when the engine returned the stored
            answer of the same script on the same data).
        neighbouring: ``add_remove`` or ``replace``.
        epsilon: ε the script's noise was drawn at (the plan's, charged or not).
    """

    tables: dict[str, np.ndarray]
    attributes: dict[str, Attribute]
    classes: tuple[str, ...]
    class_counts: np.ndarray | None
    sensitivity: float
    epsilon_spent: float
    neighbouring: str
    epsilon: float

    @property
    def scale(self) -> float:
        """Laplace scale of every cell: the script's sensitivity over its planned ε (not the
        spend, which is 0 for a reused answer)."""
        return self.sensitivity / self.epsilon


def quote(identifier: str) -> str:
    """A double-quoted SQL identifier (names like ``hours-per-week`` or ``v(g)`` need it)."""
    return '"' + identifier.replace('"', '""') + '"'


def equal_width_bins(name: str, lower: float, upper: float, bins: int, *,
                     integer: bool = False) -> Attribute:
    """Public equal-width bins of a numeric column over its declared bounds.

    At most ``dpsql.MAX_DOMAIN_VALUES`` bins: the engine releases no more public values for a
    key. Values below ``lower`` fall in the first bin and values above ``upper`` in the last, as the
    engine's clamping would put them. For an int column the range is [lower, upper + 1) so
    that each bin holds the same number of whole values when they divide evenly.

    Example:
        >>> equal_width_bins("age", 0, 90, 3).domain
        ('[0, 30)', '[30, 60)', '[60, 90]')
    """
    if bins < 1:
        raise dpsql.ProgrammingError(f"bins must be >= 1, got {bins}", hint="use bins=5")
    _catalog.check_bins(bins)
    top = upper + 1 if integer else upper
    width = (top - lower) / bins
    cuts = [lower + i * width for i in range(bins + 1)]
    cuts[-1] = upper if not integer else top
    labels = [f"[{cuts[i]:g}, {cuts[i + 1]:g})" for i in range(bins)]
    if not integer:
        labels[-1] = f"[{cuts[-2]:g}, {cuts[-1]:g}]"
    return Attribute(name, tuple(labels), EqualWidthBins(lower, top - lower, bins))


def catalog_attributes(
    metadata: object,
    table: str,
    class_column: str,
    names: Sequence[str] | None = None,
    bins: int = DEFAULT_BINS,
) -> tuple[list[Attribute], tuple]:
    """The candidate attributes of ``table`` and the class's declared values, from metadata
    only (a release names its class columns by their labels, ``str``).

    Args:
        metadata: a YAML path, a metadata dict, or a loaded catalogue.
        table: the private table.
        class_column: the class attribute; it must declare ``values``.
        names: the attributes to use (default: every other column with a domain or bounds).
        bins: number of equal-width bins for numeric columns.

    Raises:
        dpsql.ProgrammingError: unknown table or column, a class without declared values, or an
            attribute with neither values nor bounds.
    """
    spec = _catalog.table(metadata, table)
    target = _catalog.class_column(spec, class_column)
    if names is None:
        names = [c.name for c in spec.columns.values()
                 if c.name != target.name and (c.values or c.is_bounded)]
    check_candidates(names, target.name)
    attributes = []
    for name in names:
        column = spec.column(name)
        if column is None:
            raise dpsql.UnknownColumnError(f"table {table!r} has no column {name!r}",
                                           hint=f"columns are {sorted(spec.columns)}")
        if column.values:
            attributes.append(Attribute(column.name, tuple(str(v) for v in column.values),
                                        values=tuple(column.values)))
        elif column.is_numeric and column.is_bounded:
            attributes.append(equal_width_bins(column.name, column.lower, column.upper, bins,
                                               integer=column.type == "int"))
        else:
            raise dpsql.ProgrammingError(
                f"column {name!r} of table {table!r} has neither values nor bounds",
                hint="declare its public values, or lower/upper bounds for binning",
            )
    return attributes, tuple(target.values)


def check_candidates(names: Sequence[str], class_column: str) -> None:
    """Refuse the class and a repeated name as candidate attributes, before anything is read.

    In attribute selection the class gave the engine two GROUP BY keys of one name and a
    repeat failed the k-table sensitivity check as an InternalError ('this is a bug'); Naive
    Bayes dropped the class and modelled the prior alone.

    Raises:
        dpsql.ProgrammingError: the class or a repeated name among ``names``.
    """
    seen: set[str] = set()
    for name in names:
        if name == class_column:
            raise dpsql.ProgrammingError(
                f"the class {class_column!r} cannot also be a candidate attribute",
                hint="leave it out of the attributes; it is always the class")
        if name in seen:
            raise dpsql.ProgrammingError(f"attribute {name!r} is given twice",
                                         hint="name each candidate attribute once")
        seen.add(name)


def contingency_statements(table: str, class_column: str, attributes: Sequence[Attribute], *,
                           with_class_count: bool = False) -> list[str]:
    """One GROUP BY statement per attribute (and optionally the class count), in order.

    GROUP BY names its keys by position: a table column named like the alias ``key`` would be
    read in place of the binned key.

    Example:
        >>> contingency_statements("car", "class", [Attribute("doors", ("2", "3"))])[0]
        'SELECT "doors" AS "key", "class", COUNT(*) AS n FROM "car" GROUP BY 1, 2'
    """
    target, source = quote(class_column), quote(table)
    statements = [
        f'SELECT {a.key} AS "key", {target}, COUNT(*) AS n FROM {source} GROUP BY 1, 2'
        for a in attributes
    ]
    if with_class_count:
        statements.append(f"SELECT {target}, COUNT(*) AS n FROM {source} GROUP BY {target}")
    return statements


def expected_sensitivity(statements: int, neighbouring: str) -> int:
    """L1 sensitivity of ``statements`` disjoint histograms: n (add/remove) or 2n (replace)."""
    return statements * (2 if neighbouring == "replace" else 1)


def release_tables(
    connection: dpsql.Connection,
    table: str,
    class_column: str,
    attributes: Sequence[Attribute],
    classes: Sequence,
    epsilon: float,
    *,
    with_class_count: bool = False,
) -> ContingencyRelease:
    """Send the contingency script through ``connection`` as one release and read it back.

    ``classes`` are the class's declared values (``catalog_attributes``'), or their labels: the
    released classes and keys are matched to them, and the attributes' domains, by value. The
    plan is explained first (spends nothing). On a row-privacy table each statement is a
    histogram in which one person holds one cell, so the plan is refused unless its
    sensitivity is n (add/remove) or 2n (replace): a wrong accounting never costs budget. (With
    a privacy unit and contribution bounds the engine's own value is used.)

    Raises:
        dpsql.InternalError: the engine's sensitivity differs from n / 2n on a row-privacy
            table, or it returned a key outside the public domain.
    """
    statements = contingency_statements(table, class_column, attributes,
                                        with_class_count=with_class_count)
    script = ";\n".join(statements) + ";"
    plan = connection.explain(script, epsilon=epsilon)
    neighbouring = plan["neighbouring"]
    expected = expected_sensitivity(len(statements), neighbouring)
    if (connection.catalog.table(table).is_row_privacy
            and float(plan["total_sensitivity"]) != expected):
        raise dpsql.InternalError(
            f"the engine plans sensitivity {plan['total_sensitivity']} for {len(statements)} "
            f"contingency tables under {neighbouring}; expected {expected}"
        )
    cursor = connection.cursor()
    cursor.executescript(script, epsilon=epsilon)
    frames = cursor.fetchdfs()
    tables = {a.name: _to_array(frame.iloc[:, :3], a.key_codes(frame.iloc[:, 0]), classes,
                                len(a.domain), a.name)
              for a, frame in zip(attributes, frames)}
    class_counts = None
    if with_class_count:
        released = frames[-1]
        as_table = pd.DataFrame({"key": "all", "class": released.iloc[:, 0],
                                 "n": released.iloc[:, 1]})
        class_counts = _to_array(as_table, np.zeros(len(as_table), dtype=np.int64), classes, 1,
                                 class_column)[0]
    return ContingencyRelease(
        tables=tables,
        attributes={a.name: a for a in attributes},
        classes=tuple(str(c) for c in classes),
        class_counts=class_counts,
        sensitivity=float(cursor.sensitivity),
        epsilon_spent=float(cursor.epsilon_spent),
        neighbouring=neighbouring,
        epsilon=float(plan["epsilon"]),
    )


def _to_array(frame: pd.DataFrame, rows: np.ndarray, classes: Sequence, size: int,
              what: str) -> np.ndarray:
    """A (key, class, count) frame as a dense (``size``, |classes|) array: ``rows`` is each
    key's index in its domain, and each class is matched to ``classes`` by value."""
    columns = value_codes(frame.iloc[:, 1], classes)
    outside = (rows < 0) | (columns < 0)
    if outside.any():
        key, label = frame.iloc[int(np.argmax(outside)), :2]
        raise dpsql.InternalError(
            f"{what}: the engine released key ({key!r}, {label!r}) outside the public domain"
        )
    counts = np.zeros((size, len(classes)))
    counts[rows, columns] = frame.iloc[:, 2].to_numpy(dtype=float)
    return counts


def exact_tables(frame: pd.DataFrame, class_column: str, attributes: Sequence[Attribute],
                 classes: Sequence) -> dict[str, np.ndarray]:
    """Exact (non-private) contingency tables of a pandas frame, same layout as a release.

    Values and classes are matched to their domains value by value (``Attribute.encode``,
    ``domain_labels``; ``classes`` as declared, or their labels); a row whose value or class
    is missing or outside its domain is left out, as GROUP BY on the public domain leaves it.
    """
    target = domain_labels(frame[class_column], classes)
    labels = [str(c) for c in classes]
    tables = {}
    for a in attributes:
        counts = pd.crosstab(a.encode(frame[a.name]), target)
        tables[a.name] = counts.reindex(index=list(a.domain), columns=labels,
                                        fill_value=0).to_numpy(dtype=float)
    return tables


def encode_frame(frame: pd.DataFrame, attributes: Sequence[Attribute]) -> pd.DataFrame:
    """The frame's attribute columns as domain labels (numeric columns binned like the SQL)."""
    return pd.DataFrame({a.name: a.encode(frame[a.name]) for a in attributes}, index=frame.index)
