"""Generalization hierarchies: ARX-format CSV tables, numeric interval bands and code masking.

A hierarchy maps a column to one label per level (level 0 = the original value, the last
level = ``*``). Each hierarchy renders a level as a sqlglot expression, so generalization
always runs as SQL; the lattice search materializes the same expressions once over the
column's distinct values (``level_table``) and works on integer codes from there.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import duckdb
import pandas as pd
from sqlglot import exp

import dpsql

SUPPRESSED = "*"


class Hierarchy(Protocol):
    """What the generalizer needs from a hierarchy: its height and one SQL expression a level."""

    attribute: str

    @property
    def levels(self) -> int:
        """Number of levels including level 0 (the original values)."""

    def expression(self, column: exp.Expression, level: int) -> exp.Expression:
        """The VARCHAR label of ``column`` at ``level``."""


def _as_text(column: exp.Expression) -> exp.Expression:
    return exp.cast(column, "VARCHAR")


def _check_level(hierarchy: Hierarchy, level: int) -> None:
    if not 0 <= level < hierarchy.levels:
        raise dpsql.ProgrammingError(
            f"level {level} is outside the hierarchy of {hierarchy.attribute!r} "
            f"(levels 0..{hierarchy.levels - 1})"
        )


@dataclass(frozen=True)
class TableHierarchy:
    """A value-table hierarchy (ARX CSV format): each original value lists its labels per level."""

    attribute: str
    rows: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        widths = {len(row) for row in self.rows}
        if len(widths) != 1:
            raise dpsql.ProgrammingError(
                f"hierarchy of {self.attribute!r} has rows of different lengths {sorted(widths)}",
            )

    @property
    def levels(self) -> int:
        """Number of levels including level 0."""
        return len(self.rows[0])

    def expression(self, column: exp.Expression, level: int) -> exp.Expression:
        """``CASE CAST(col AS VARCHAR) WHEN value THEN label ... END`` (NULL if not covered)."""
        _check_level(self, level)
        if level == 0:
            return _as_text(column)
        # A CASE even when every label is '*': a value missing from the table must give NULL,
        # which level_table reports, instead of being generalized silently.
        case = exp.Case(this=_as_text(column))
        for row in self.rows:
            case = case.when(exp.Literal.string(row[0]), exp.Literal.string(row[level]))
        return case


@dataclass(frozen=True)
class IntervalHierarchy:
    """Numeric bands: level ``l`` (1..len(widths)) puts x in ``[w·⌊x/w⌋, w·⌊x/w⌋ + w[``."""

    attribute: str
    widths: tuple[int, ...]

    @property
    def levels(self) -> int:
        """Number of levels: the value, one per band width, then ``*``."""
        return len(self.widths) + 2

    def expression(self, column: exp.Expression, level: int) -> exp.Expression:
        """The band label ``[lo, hi[`` as VARCHAR, built from integer division."""
        _check_level(self, level)
        if level == 0:
            return _as_text(column)
        if level == self.levels - 1:
            return exp.Literal.string(SUPPRESSED)
        width = exp.Literal.number(self.widths[level - 1])
        low = exp.Mul(this=exp.IntDiv(this=exp.cast(column, "BIGINT"), expression=width),
                      expression=width)
        high = exp.Add(this=low.copy(), expression=width.copy())
        return exp.DPipe(
            this=exp.DPipe(
                this=exp.DPipe(this=exp.Literal.string("["), expression=_as_text(low)),
                expression=exp.Literal.string(", "),
            ),
            expression=exp.DPipe(this=_as_text(high), expression=exp.Literal.string("[")),
        )


@dataclass(frozen=True)
class MaskingHierarchy:
    """Right-to-left masking of fixed-length codes (ZIP): level ``l`` replaces the last l chars."""

    attribute: str
    length: int

    @property
    def levels(self) -> int:
        """Number of levels: 0..length masked characters."""
        return self.length + 1

    def expression(self, column: exp.Expression, level: int) -> exp.Expression:
        """``substr(code, 1, length - l) || repeat('*', l)``."""
        _check_level(self, level)
        text = _as_text(column)
        if level == 0:
            return text
        if level == self.length:
            return exp.Literal.string(SUPPRESSED * self.length)
        kept = exp.Substring(this=text, start=exp.Literal.number(1),
                             length=exp.Literal.number(self.length - level))
        mask = exp.Anonymous(this="repeat", expressions=[exp.Literal.string(SUPPRESSED),
                                                          exp.Literal.number(level)])
        return exp.DPipe(this=kept, expression=mask)


def read_arx_hierarchy(path: str | Path, attribute: str | None = None) -> TableHierarchy:
    """Read an ARX hierarchy CSV (``;``-separated; column 0 the value, column i its level i).

    Example:
        >>> import tempfile, os
        >>> f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
        >>> _ = f.write("Male;*\\r\\nFemale;*\\r\\n"); f.close()
        >>> read_arx_hierarchy(f.name, "sex").rows
        (('Male', '*'), ('Female', '*'))
        >>> os.unlink(f.name)
    """
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        rows = tuple(
            tuple(cell.strip() for cell in row)
            for row in csv.reader(handle, delimiter=";")
            if row and any(cell.strip() for cell in row)
        )
    if not rows:
        raise dpsql.ProgrammingError(f"hierarchy file {str(path)!r} is empty")
    return TableHierarchy(attribute or path.stem, rows)


def load_hierarchies(directory: str | Path, attributes: list[str]) -> dict[str, TableHierarchy]:
    """Load ``<attribute>.csv`` (or ARX's ``*_hierarchy_<attribute>.csv``) for each attribute."""
    directory = Path(directory)
    found = {}
    for attribute in attributes:
        candidates = [directory / f"{attribute}.csv",
                      *directory.glob(f"*hierarchy_{attribute}.csv")]
        path = next((p for p in candidates if p.is_file()), None)
        if path is None:
            raise dpsql.ProgrammingError(
                f"no hierarchy for quasi-identifier {attribute!r} in {str(directory)!r}",
                hint=f"add {attribute}.csv (ARX format) or drop {attribute!r} from the QIDs",
            )
        found[attribute] = read_arx_hierarchy(path, attribute)
    return found


def level_table(
    con: duckdb.DuckDBPyConnection, relation: str, column: str, hierarchy: Hierarchy
) -> pd.DataFrame:
    """The distinct values of ``column`` with their label at every level (columns ``l0..lH``).

    Raises:
        DataError: a value of the column has no label (missing from the hierarchy).
    """
    col = exp.column(column, quoted=True)
    select = exp.select(
        *(hierarchy.expression(col, level).as_(f"l{level}") for level in range(hierarchy.levels))
    ).from_(exp.Subquery(this=exp.select(col).distinct().from_(relation), alias="v"))
    frame = con.execute(select.sql("duckdb")).df()
    missing = frame[frame.isna().any(axis=1)]
    if len(missing):
        raise dpsql.DataError(
            f"values of {column!r} missing from its hierarchy: "
            f"{sorted(map(str, missing['l0'].tolist()))[:5]}",
            hint="add a row for each value to the hierarchy file",
        )
    return frame
