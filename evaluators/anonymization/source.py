"""Access to the microdata: a logged custodian connection and the working copy with row ids.

Anonymization needs exact group sizes, so it runs on a custodian connection (never an analyst
one): the read of the source table goes through the custodian cursor, which writes it to the
ledger as a non-private access; the bulk work on the copy then uses the raw DuckDB connection.
"""

from __future__ import annotations

import os

from sqlglot import exp

import dpsql
from evaluators import _catalog

SOURCE = "anon_source"  # immutable working copy: rid + QIDs + sensitive attribute


def open_custodian(
    metadata: str | os.PathLike | dict, *, analyst: str | None = None,
    ledger: str | os.PathLike | None = None,
) -> dpsql.CustodianConnection:
    """A custodian connection on the catalogue (ledger default: beside the metadata file)."""
    return dpsql.connect_custodian(None, metadata=metadata, analyst=analyst, ledger=ledger)


def create_source(
    custodian: dpsql.CustodianConnection, table: str, columns: list[str], name: str = SOURCE
) -> str:
    """Copy ``columns`` of ``table`` into a temp table ``name`` with a stable row id ``rid``.

    The copy is the pristine original that ρ-Gain restores suppressed records from, so it is
    materialized once and never changed.

    Raises:
        ProgrammingError: a column is not in the table.
    """
    _catalog.table(custodian.catalog, table)  # an unknown table is a coded error, as elsewhere
    present = [row[0] for row in custodian.duckdb.execute(f"DESCRIBE {_quote(table)}").fetchall()]
    unknown = [c for c in columns if c not in present]
    if unknown:
        raise dpsql.ProgrammingError(
            f"columns {unknown} are not in table {table!r}", hint=f"choose among {present}"
        )
    select = exp.select(
        exp.alias_(exp.Window(this=exp.RowNumber()), "rid"),
        *(exp.column(c, quoted=True) for c in columns),
    ).from_(exp.to_table(table, quoted=True))
    custodian.execute(f"CREATE OR REPLACE TEMP TABLE {_quote(name)} AS {select.sql('duckdb')}")
    return name


def _quote(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql("duckdb")
