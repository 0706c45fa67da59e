"""Backends run an exact query tree and return column names and rows; nothing else.

Only exact bounded aggregates come back from a backend; noise is always added in dpsql.
"""

from __future__ import annotations

from typing import Protocol

from sqlglot import exp


class Backend(Protocol):
    """What the engine needs from a database."""

    name: str
    dialect: str

    def run(self, tree: exp.Expression) -> tuple[list[str], list[tuple]]:
        """Execute a query tree; return (column names, rows)."""

    def close(self) -> None:
        """Release the connection."""
