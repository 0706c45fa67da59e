"""The DP SQL a tree sends: one script per level, one GROUP BY statement per candidate attribute.

Every statement groups by a node id computed as ``CASE WHEN <path of node 0> THEN 0 WHEN ...
END`` (no ELSE). The nodes of one level have disjoint paths, so each row lands in at most one
node and the statement is one contingency table of sensitivity 1 (add/remove) whatever the
number of nodes: the nodes compose in parallel. Rows of finished branches match no WHEN, get a
NULL node id and are dropped by the engine. All keys (node ids, attribute values or public bins,
classes) have public domains, so the engine releases every cell, zeros included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evaluators.decision_tree.attributes import Attribute, Schema, quote_identifier

ALL_ROWS = "TRUE"  # path predicate of a root that sees the whole table


@dataclass(frozen=True, slots=True)
class CountStatement:
    """One GROUP BY of a level script: node × class, or node × attribute value × class."""

    sql: str
    nodes: tuple[int, ...]
    attribute: Attribute | None = None


def node_case(paths: Mapping[int, str]) -> str:
    """The node-id CASE over disjoint path predicates (no ELSE: other rows are dropped).

    Example:
        >>> node_case({0: '"a" = 1', 1: '"a" = 2'})
        'CASE WHEN "a" = 1 THEN 0 WHEN "a" = 2 THEN 1 END'
    """
    whens = " ".join(f"WHEN {predicate} THEN {node}" for node, predicate in paths.items())
    return f"CASE {whens} END"


def path_predicate(conditions: Sequence[str]) -> str:
    """Conjunction of a node's split conditions (TRUE for a root with no conditions).

    Example:
        >>> path_predicate(['"a" = 1', '"b" >= 3 AND "b" < 5'])
        '("a" = 1) AND ("b" >= 3 AND "b" < 5)'
    """
    if not conditions:
        return ALL_ROWS
    return " AND ".join(f"({condition})" for condition in conditions)


def class_statement(schema: Schema, paths: Mapping[int, str]) -> CountStatement:
    """Node × class counts: node sizes, class distributions and leaf labels."""
    sql = (f"SELECT {node_case(paths)} AS node, {quote_identifier(schema.target)} AS c, "
           f"COUNT(*) AS n FROM {quote_identifier(schema.table)} GROUP BY node, c")
    return CountStatement(sql=sql, nodes=tuple(paths))


def attribute_statement(schema: Schema, attribute: Attribute,
                        paths: Mapping[int, str]) -> CountStatement:
    """Node × attribute value × class counts for the nodes where ``attribute`` is a candidate."""
    sql = (f"SELECT {node_case(paths)} AS node, {attribute.value_sql()} AS v, "
           f"{quote_identifier(schema.target)} AS c, COUNT(*) AS n "
           f"FROM {quote_identifier(schema.table)} GROUP BY node, v, c")
    return CountStatement(sql=sql, nodes=tuple(paths), attribute=attribute)


def level_statements(schema: Schema, paths: Mapping[int, str],
                     candidates: Mapping[int, Sequence[str]]) -> list[CountStatement]:
    """The statements of one level: node × class, then one per attribute some node may split on.

    Args:
        schema: public table description.
        paths: path predicate of each active node, by node id.
        candidates: attribute names each node may still split on.
    """
    statements = [class_statement(schema, paths)]
    for attribute in schema.attributes:
        subset = {node: path for node, path in paths.items()
                  if attribute.name in candidates[node]}
        if subset:
            statements.append(attribute_statement(schema, attribute, subset))
    return statements


def script(statements: Sequence[CountStatement]) -> str:
    """The statements as one SQL script (one release, one ε)."""
    return ";\n".join(statement.sql for statement in statements) + ";"
