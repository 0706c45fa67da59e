"""Split attributes with public domains: declared categories, or public bins of numeric columns.

Everything here comes from the metadata, never from the rows: a categorical attribute's
values are the column's declared ``values:`` and a numeric attribute is cut into equal-width
bins over its declared ``[lower, upper]`` (or at thresholds the analyst passes). A split on
such an attribute therefore reveals nothing beyond the DP counts that chose it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

import dpsql
import dpsql.catalog
from evaluators import _catalog
from evaluators._bins import EqualWidthBins
from evaluators._domains import value_codes

UNKNOWN = -1  # value index of a row whose value lies outside the public domain (or is NULL)


def quote_identifier(name: str) -> str:
    """A SQL identifier in double quotes (names such as ``salary-class`` need them)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(value: object) -> str:
    """A SQL literal for a declared domain value or a numeric threshold."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


@dataclass(frozen=True, slots=True)
class Attribute:
    """One split attribute: its public values (categories or bins) and their SQL forms.

    ``thresholds`` is empty for a categorical attribute; for a numeric one, bin ``i`` is
    ``thresholds[i-1] <= x < thresholds[i]`` with open ends at both sides of the domain. Equal-
    width bins also carry ``bins``, by which the SQL and ``encode`` compute a value's bin in one
    expression (the thresholds then only label them).
    """

    name: str
    values: tuple
    thresholds: tuple[float, ...] = ()
    bins: EqualWidthBins | None = None

    @property
    def is_numeric(self) -> bool:
        """True for a binned numeric column."""
        return bool(self.thresholds)

    @property
    def size(self) -> int:
        """Number of public values (categories or bins)."""
        return len(self.values)

    def label(self, index: int) -> str:
        """Human-readable text of value ``index`` (a category, or a bin such as ``[31, 46)``)."""
        if not self.is_numeric:
            return str(self.values[index])
        low = "-inf" if index == 0 else f"{self.thresholds[index - 1]:g}"
        high = "inf" if index == len(self.thresholds) else f"{self.thresholds[index]:g}"
        return f"[{low}, {high})"

    def value_sql(self) -> str:
        """The GROUP BY expression whose result has this attribute's public domain.

        A categorical column is grouped as it is (its domain is declared); equal-width bins by
        their clamped FLOOR; explicit thresholds by a CASE with literal results and no ELSE.
        NULL is dropped rather than binned.
        """
        column = quote_identifier(self.name)
        if not self.is_numeric:
            return column
        if self.bins is not None:
            return self.bins.sql(column)
        whens = [f"WHEN {column} < {quote_literal(t)} THEN {i}"
                 for i, t in enumerate(self.thresholds)]
        last = len(self.thresholds)
        whens.append(f"WHEN {column} >= {quote_literal(self.thresholds[-1])} THEN {last}")
        return "CASE " + " ".join(whens) + " END"

    def predicate_sql(self, index: int) -> str:
        """The row predicate of value ``index`` (used in the node-id CASE of deeper levels)."""
        column = quote_identifier(self.name)
        if not self.is_numeric:
            return f"{column} = {quote_literal(self.values[index])}"
        if self.bins is not None:  # the bin as value_sql computes it, not its rounded edges
            return f"{self.bins.sql(column)} = {index}"
        parts = []
        if index > 0:
            parts.append(f"{column} >= {quote_literal(self.thresholds[index - 1])}")
        if index < len(self.thresholds):
            parts.append(f"{column} < {quote_literal(self.thresholds[index])}")
        return " AND ".join(parts)

    def indices_of_released(self, keys: pd.Series) -> np.ndarray:
        """Value indices of GROUP BY keys as the engine released them (UNKNOWN for NULL)."""
        if self.is_numeric:
            return pd.to_numeric(keys, errors="coerce").fillna(UNKNOWN).to_numpy(dtype=int)
        return _lookup(self.values, keys)

    def encode(self, column: pd.Series) -> np.ndarray:
        """Value indices of a column of rows (for prediction); UNKNOWN outside the domain."""
        if self.is_numeric:
            numbers = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
            indices = self.bins.index(numbers) if self.bins is not None else \
                np.searchsorted(np.asarray(self.thresholds), numbers, side="right")
            return np.where(np.isnan(numbers), UNKNOWN, indices).astype(int)
        return _lookup(self.values, column)


def _lookup(domain: Sequence, keys: pd.Series) -> np.ndarray:
    """Positions of ``keys`` in ``domain`` (UNKNOWN for NULL or values outside it), matched
    value by value (``value_codes``): as text, one NULL among a column's ints made them floats
    ('1.0'), which matched no declared 1, and a timestamp key no declared '2020-01-01'."""
    return value_codes(keys, domain)


@dataclass(frozen=True, slots=True)
class Schema:
    """The public description a tree is grown from: table, class column, split attributes."""

    table: str
    target: str
    classes: tuple
    attributes: tuple[Attribute, ...]
    neighbouring: str = "add_remove"

    def attribute(self, name: str) -> Attribute:
        """The split attribute called ``name``."""
        for attribute in self.attributes:
            if attribute.name == name:
                return attribute
        raise dpsql.ProgrammingError(f"{name!r} is not a split attribute of this tree",
                                     hint=f"use one of {[a.name for a in self.attributes]}")

    def class_indices(self, keys: pd.Series) -> np.ndarray:
        """Class indices of released or observed class values (UNKNOWN outside the domain)."""
        return _lookup(self.classes, keys)


def schema_from_metadata(
    metadata: str | Mapping,
    table: str,
    target: str,
    *,
    attributes: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    numeric_bins: int = 5,
    thresholds: Mapping[str, Sequence[float]] | None = None,
) -> Schema:
    """Build the public split schema of ``table`` from its metadata.

    Args:
        metadata: YAML path or dict, as for ``dpsql.connect``.
        table: the private table.
        target: the class column; it must declare ``values:``.
        attributes: split attributes (default: every other column with a public domain).
        exclude: columns to leave out of the default attribute list.
        numeric_bins: equal-width bins over ``[lower, upper]`` for numeric columns.
        thresholds: explicit public cut points per numeric column (overrides the bins).

    Raises:
        dpsql.UnknownColumnError: an excluded column is not in the table.
        dpsql.ProgrammingError: the table, class or an attribute has no public domain.
    """
    catalog = dpsql.catalog.load_catalog(
        dict(metadata) if isinstance(metadata, Mapping) else metadata)
    spec = _catalog.table(catalog, table)
    target_spec = _catalog.class_column(spec, target)
    unknown = [name for name in exclude if spec.column(name) is None]
    if unknown:
        raise dpsql.UnknownColumnError(f"table {table!r} has no column {unknown[0]!r} to exclude",
                                       hint=f"columns are {sorted(spec.columns)}")
    explicit = attributes is not None
    names = list(attributes) if explicit else [
        name for name in spec.columns
        if name.lower() != target_spec.name.lower() and name not in exclude
        and name != spec.privacy_unit]
    built = []
    for name in names:
        column = spec.column(name)
        if column is None:
            raise dpsql.ProgrammingError(f"table {table!r} has no column {name!r}",
                                         hint=f"use one of {sorted(spec.columns)}")
        attribute = _attribute(column, numeric_bins, (thresholds or {}).get(column.name))
        if attribute is not None:
            built.append(attribute)
        elif explicit:
            raise dpsql.ProgrammingError(
                f"column {name!r} has no public domain to split on",
                hint="declare 'values:' (categories) or 'lower'/'upper' (numeric bins)")
    if not built:
        raise dpsql.ProgrammingError(f"table {table!r} has no attribute with a public domain")
    return Schema(table=spec.name, target=target_spec.name, classes=target_spec.values,
                  attributes=tuple(built), neighbouring=catalog.neighbouring)


def _attribute(column: Any, bins: int, cuts: Sequence[float] | None) -> Attribute | None:
    if column.values:
        return Attribute(column.name, tuple(column.values))
    if not (column.is_numeric and column.is_bounded):
        return None
    if cuts is not None:
        cuts = tuple(cuts)
        return Attribute(column.name, tuple(range(len(cuts) + 1)), cuts) if cuts else None
    integer = column.type == "int"
    cuts = equal_width_thresholds(column.lower, column.upper, bins, integer=integer)
    if not cuts:
        return None
    binned = equal_width_bins(column.lower, column.upper, bins, integer=integer)
    # int bounds that are not whole numbers give other cut points: those keep the CASE
    return Attribute(column.name, tuple(range(len(cuts) + 1)), cuts,
                     binned if binned.count == len(cuts) + 1 else None)


def equal_width_bins(lower: float, upper: float, bins: int, *,
                     integer: bool) -> EqualWidthBins:
    """The bins whose edges ``equal_width_thresholds`` gives, as one expression.

    An int column with fewer whole values than ``bins`` has one bin a value (the thresholds'
    repeated cut points are dropped); otherwise a whole value x is at or above the cut
    ``ceil(lower + i * width)`` exactly when it is at or above ``lower + i * width``.

    Example:
        >>> equal_width_bins(0, 3, 10, integer=True)
        EqualWidthBins(lower=0, span=4, count=4)
    """
    if integer and bins > upper - lower:
        return EqualWidthBins(lower, upper - lower + 1, int(upper - lower) + 1)
    return EqualWidthBins(lower, upper - lower, bins)


def equal_width_thresholds(lower: float, upper: float, bins: int, *,
                           integer: bool) -> tuple[float, ...]:
    """Inner cut points of ``bins`` equal-width bins over ``[lower, upper]`` (public).

    Example:
        >>> equal_width_thresholds(0, 100, 4, integer=True)
        (25, 50, 75)
    """
    if bins < 2:
        raise dpsql.ProgrammingError(f"numeric_bins must be at least 2, got {bins}")
    _catalog.check_bins(bins)
    if integer:  # exactly: in doubles 0 + 7 * (36 / 28) is 9.000000000000002, whose ceil is 10
        width = (Fraction(upper) - Fraction(lower)) / bins
        cuts = [math.ceil(Fraction(lower) + i * width) for i in range(1, bins)]
    else:
        width = (upper - lower) / bins
        cuts = [lower + i * width for i in range(1, bins)]
    return tuple(sorted({c for c in cuts if lower < c <= upper}))
