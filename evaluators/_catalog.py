"""What the evaluators need of a catalogue beyond dpsql's own checks: a table by name, its
class column, and a number of public bins the engine can release."""

from __future__ import annotations

from collections.abc import Mapping

import dpsql
from dpsql import MAX_DOMAIN_VALUES
from dpsql.catalog import TableSpec, load_catalog


def table(metadata, name: str) -> TableSpec:
    """The table ``name`` (case-insensitive) of ``metadata`` (a YAML path, a dict or a loaded
    catalogue).

    Raises:
        dpsql.UnknownTableError: the metadata declares no such table (the hint lists them).
    """
    catalog = load_catalog(dict(metadata) if isinstance(metadata, Mapping) else metadata)
    spec = catalog.table(name)
    if spec is None:
        raise dpsql.UnknownTableError(f"table {name!r} is not in the metadata",
                                      hint=f"tables are {sorted(catalog.tables)}")
    return spec


def class_column(spec, name: str):
    """The column ``name`` of the table ``spec``, which must declare its values: a class (the
    label an evaluator predicts or scores against) needs a public domain.

    Raises:
        dpsql.UnknownColumnError: the table has no such column (the hint lists its columns).
        dpsql.ProgrammingError: the column declares no values.
    """
    column = spec.column(name)
    if column is None:
        raise dpsql.UnknownColumnError(
            f"table {spec.name!r} has no column {name!r} to use as the class",
            hint=f"columns are {sorted(spec.columns)}")
    if not column.values:
        raise dpsql.ProgrammingError(
            f"class column {column.name!r} of table {spec.name!r} has no declared values",
            hint="the class needs a public domain: add 'values: [...]' to its metadata")
    return column


def check_bins(bins: int) -> None:
    """Refuse more equal-width bins than one GROUP BY key may have public values, before
    anything is read: past ``dpsql.MAX_DOMAIN_VALUES`` the engine took the bins for a private
    key (after minutes of work, and a hint to give a δ).

    Raises:
        dpsql.ProgrammingError: ``bins`` exceeds ``dpsql.MAX_DOMAIN_VALUES``.
    """
    if bins > MAX_DOMAIN_VALUES:
        raise dpsql.ProgrammingError(
            f"{bins:,} bins are more than the {MAX_DOMAIN_VALUES:,} public values the engine "
            f"releases for one GROUP BY key",
            hint=f"use at most {MAX_DOMAIN_VALUES:,} bins (--bins)")
