"""What the evaluators need of a catalogued table beyond dpsql's own checks."""

from __future__ import annotations

import dpsql


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
