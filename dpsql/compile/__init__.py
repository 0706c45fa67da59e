"""The compile stage: analyst SQL -> IR, built from an allow-list, rendered per dialect.

``compile_statement`` resolves the FROM clause with real scopes (``scope.py``), builds every
expression from the allow-list (``ops.py``) and returns either a ``CheckedQuery`` over
private data (``select.py``) or a ``PublicQuery`` over public tables only (``public.py``).
The SQL a database runs is rendered from the IR (``render.py``); row-level bounding is
written once (``bound.py``).
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.catalog import Catalog
from dpsql.compile.public import PublicQuery, compile_public, inlined_lists
from dpsql.compile.scope import Resolver
from dpsql.compile.select import compile_select, refuse_non_select, rewritten_select
from dpsql.plan import CheckedQuery, Statement


def compile_statement(statement: Statement, catalog: Catalog, *, private_keys: bool = False,
                      public_values=None, public_tuples=None, public_rows=None
                      ) -> CheckedQuery | PublicQuery:
    """Compile one statement: private data -> CheckedQuery, public tables only -> PublicQuery.

    ``public_values(table, column)`` returns the distinct values of a public table's column
    (a GROUP BY key's domain), or None when there are too many; ``public_tuples(part, keys,
    filters, nulls)`` the distinct tuples of GROUP BY keys over a public part of FROM (the
    joint domain of keys read from one public table, ``scope.tuples_sql``), or None;
    ``public_rows(query, limit)`` the first ``limit`` rows of a ``PublicQuery`` (a subquery of
    IN over public tables, read as a list of literals: ``public.inlined_lists``).

    Raises:
        dpsql.ProgrammingError / dpsql.UnsupportedSQLError: with what to change.
    """
    tree = statement.tree
    if not isinstance(tree, exp.Select):
        raise refuse_non_select(tree, statement)
    select = rewritten_select(tree)
    if public_rows is not None:
        select = inlined_lists(select, catalog, statement, public_values, public_rows)
    relation = Resolver(catalog, statement.sql, public_values=public_values).from_clause(select)
    if relation.public:
        return compile_public(select, relation, statement)
    return compile_select(select, relation, catalog, statement, private_keys=private_keys,
                          public_values=public_values, public_tuples=public_tuples)


__all__ = ["CheckedQuery", "PublicQuery", "compile_statement"]
