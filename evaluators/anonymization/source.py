"""Access to the microdata: a custodian DuckDB connection and the working copy with row ids.

Anonymization needs exact group sizes, so it runs on a custodian connection (never an
analyst one). ``open_custodian`` is the only place that knows how that connection is made.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
from sqlglot import exp

import dpsql.errors as errors
from dpsql.catalog import load_catalog

SOURCE = "anon_source"  # immutable working copy: rid + QIDs + sensitive attribute


def open_custodian(metadata: str | os.PathLike | dict) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection on which every table of the catalogue can be queried exactly."""
    catalog = load_catalog(metadata)
    con = duckdb.connect()
    for spec in catalog.tables.values():
        if spec.source is None:
            continue
        options = {"header": True, **{k: v for k, v in spec.csv.items() if k != "trim"}}
        if "delimiter" in options:
            options["delim"] = options.pop("delimiter")
        args = ", ".join(f"{k}={_literal(v)}" for k, v in options.items())
        path = Path(spec.source)
        if not path.is_file():
            raise errors.DataError(
                f"source {str(path)!r} of table {spec.name!r} does not exist",
                hint="set DPSQL_DATASETS to the folder of the shared data sets",
            )
        con.execute(
            f"CREATE VIEW {exp.to_identifier(spec.name, quoted=True).sql('duckdb')} AS "
            f"SELECT * FROM read_csv({_literal(str(path))}, {args})"
        )
    return con


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return exp.Literal.string(str(value)).sql("duckdb")


def create_source(
    con: duckdb.DuckDBPyConnection, table: str, columns: list[str], name: str = SOURCE
) -> str:
    """Copy ``columns`` of ``table`` into a temp table ``name`` with a stable row id ``rid``.

    The copy is the pristine original that ρ-Gain restores suppressed records from, so it is
    materialized once and never changed.
    """
    present = {row[0] for row in con.execute(f"DESCRIBE {_quote(table)}").fetchall()}
    unknown = [c for c in columns if c not in present]
    if unknown:
        raise errors.ProgrammingError(
            f"columns {unknown} are not in table {table!r}",
            hint=f"choose among {sorted(present)}",
        )
    select = exp.select(
        exp.alias_(exp.Window(this=exp.RowNumber()), "rid"),
        *(exp.column(c, quoted=True) for c in columns),
    ).from_(exp.to_table(table, quoted=True))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_quote(name)} AS {select.sql('duckdb')}")
    return name


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")
