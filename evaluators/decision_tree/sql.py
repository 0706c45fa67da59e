"""The DP SQL a tree sends: one script per level, one GROUP BY statement per candidate attribute.

Every statement groups by a node id computed as ``CASE WHEN <path of node 0> THEN 0 WHEN ...
END`` (no ELSE). The nodes of one level have disjoint paths, so each row lands in at most one
node and the statement is one contingency table of sensitivity 1 (add/remove) whatever the
number of nodes: the nodes compose in parallel. Rows of finished branches match no WHEN, get a
NULL node id and are dropped by the engine. All keys (node ids, attribute values or public bins,
classes) have public domains, so the engine releases every cell, zeros included. GROUP BY
names the keys by position: a table column named like an output alias (CM1 has a column ``v``)
would be grouped in its place.

A forest's nodes lie in the parts of its trees, so the CASE first picks the part from the
partition column, once (``CASE "tree_part" WHEN 0 THEN ... END``), and only then tests the
tree's own conditions; at the roots, where each part is one node, the node id is the partition
column itself (its declared 0..n-1 are the roots). A flat CASE named the column in each WHEN,
and the engine's work per named column made a 1,000-tree forest's level script take 14 s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import islice

from dpsql import MAX_DOMAIN_CELLS, MAX_DOMAIN_VALUES
from evaluators.decision_tree.attributes import Attribute, Schema, quote_identifier

ALL_ROWS = "TRUE"  # path predicate of a root that sees the whole table


@dataclass(frozen=True, slots=True)
class Part:
    """A forest tree's rows: those whose partition column (quoted) holds ``value``, one of its
    declared values 0..parts-1."""

    column: str
    value: int
    parts: int


@dataclass(frozen=True, slots=True)
class Path:
    """The rows that reach a node: those of its tree's part (in a forest) that meet its split
    conditions."""

    predicate: str = ALL_ROWS
    part: Part | None = None


@dataclass(frozen=True, slots=True)
class CountStatement:
    """One GROUP BY of a level script: node × class, or node × attribute value × class."""

    sql: str
    nodes: tuple[int, ...]
    attribute: Attribute | None = None


def max_nodes(schema: Schema) -> int:
    """The most nodes one script can count: the engine releases a GROUP BY key of at most
    ``MAX_DOMAIN_VALUES`` public values (the node ids) and a statement of at most
    ``MAX_DOMAIN_CELLS`` cells (nodes × classes in the class statement); past them it refused
    the script, after the levels before it were charged."""
    return min(MAX_DOMAIN_VALUES, MAX_DOMAIN_CELLS // len(schema.classes))


def node_case(paths: Mapping[int, Path]) -> str:
    """The node-id CASE over disjoint paths (no ELSE: other rows are dropped); in a forest, a
    CASE on the partition column whose parts hold their trees' CASEs, or the column itself
    when its every part is one root whose id is the part.

    Example:
        >>> node_case({0: Path('"a" = 1'), 1: Path('"a" = 2')})
        'CASE WHEN "a" = 1 THEN 0 WHEN "a" = 2 THEN 1 END'
        >>> node_case({0: Path(part=Part('"p"', 0, 3)), 1: Path('"a" = 1', Part('"p"', 2, 3))})
        'CASE "p" WHEN 0 THEN 0 WHEN 2 THEN CASE WHEN "a" = 1 THEN 1 END END'
        >>> node_case({i: Path(part=Part('"p"', i, 2)) for i in range(2)})
        '"p"'
    """
    trees: dict[Part | None, dict[int, str]] = {}
    for node, path in paths.items():
        trees.setdefault(path.part, {})[node] = path.predicate
    if list(trees) == [None]:
        return _case(trees[None])
    (column,) = {part.column for part in trees}
    if all(nodes == {part.value: ALL_ROWS} and len(trees) == part.parts
           for part, nodes in trees.items()):
        return column
    whens = " ".join(f"WHEN {part.value} THEN {_tree_case(nodes)}"
                     for part, nodes in trees.items())
    return f"CASE {column} {whens} END"


def _case(predicates: Mapping[int, str]) -> str:
    whens = " ".join(f"WHEN {predicate} THEN {node}" for node, predicate in predicates.items())
    return f"CASE {whens} END"


def _tree_case(predicates: Mapping[int, str]) -> str:
    # a tree's root (its part's every row) is its node id, with no CASE to plan or evaluate
    if len(predicates) == 1 and ALL_ROWS in predicates.values():
        return str(next(iter(predicates)))
    return _case(predicates)


def path_predicate(conditions: Sequence[str]) -> str:
    """Conjunction of a node's split conditions (TRUE for a root with no conditions).

    Example:
        >>> path_predicate(['"a" = 1', '"b" >= 3 AND "b" < 5'])
        '("a" = 1) AND ("b" >= 3 AND "b" < 5)'
    """
    if not conditions:
        return ALL_ROWS
    return " AND ".join(f"({condition})" for condition in conditions)


def class_statement(schema: Schema, paths: Mapping[int, Path]) -> CountStatement:
    """Node × class counts: node sizes, class distributions and leaf labels."""
    sql = (f"SELECT {node_case(paths)} AS node, {quote_identifier(schema.target)} AS c, "
           f"COUNT(*) AS n FROM {quote_identifier(schema.table)} GROUP BY 1, 2")
    return CountStatement(sql=sql, nodes=tuple(paths))


def attribute_statement(schema: Schema, attribute: Attribute,
                        paths: Mapping[int, Path]) -> CountStatement:
    """Node × attribute value × class counts for the nodes where ``attribute`` is a candidate."""
    sql = (f"SELECT {node_case(paths)} AS node, {attribute.value_sql()} AS v, "
           f"{quote_identifier(schema.target)} AS c, COUNT(*) AS n "
           f"FROM {quote_identifier(schema.table)} GROUP BY 1, 2, 3")
    return CountStatement(sql=sql, nodes=tuple(paths), attribute=attribute)


def level_statements(schema: Schema, paths: Mapping[int, Path],
                     candidates: Mapping[int, Sequence[str]]) -> list[CountStatement]:
    """The statements of one level: node × class, then one per attribute some node may split on.

    Args:
        schema: public table description.
        paths: path of each active node, by node id.
        candidates: attribute names each node may still split on.
    """
    statements = [class_statement(schema, paths)]
    for attribute in schema.attributes:
        # nodes past what one statement counts (MAX_DOMAIN_CELLS cells) are not offered the
        # attribute at this level: the engine refused the whole script
        most = MAX_DOMAIN_CELLS // (attribute.size * len(schema.classes))
        subset = dict(islice(((node, path) for node, path in paths.items()
                              if attribute.name in candidates[node]), most))
        if subset:
            statements.append(attribute_statement(schema, attribute, subset))
    return statements


def script(statements: Sequence[CountStatement]) -> str:
    """The statements as one SQL script (one release, one ε)."""
    return ";\n".join(statement.sql for statement in statements) + ";"
