"""Level-by-level growth: one DP script per depth, then one for the leaf labels.

At depth d every active node (of every tree, for a forest) is covered by the same script:
a node × class statement and one node × value × class statement per attribute that some node
may still split on. All choices below are post-processing of those releases.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from evaluators.decision_tree.attributes import Attribute, Schema
from evaluators.decision_tree.budget import (
    cell_noise_std,
    expected_sensitivity,
    is_splittable,
    level_epsilon,
)
from evaluators.decision_tree.counts import CountSource, Release
from evaluators.decision_tree.node import Node, set_probabilities
from evaluators.decision_tree.split import choose, debiased_gain
from evaluators.decision_tree.sql import (
    CountStatement,
    Path,
    class_statement,
    level_statements,
    max_nodes,
    path_predicate,
)

GAIN_TOLERANCE = 1e-9  # exact counts: float round-off of a zero gain


@dataclass(frozen=True, slots=True)
class GrowthSettings:
    """What the analyst chooses: total ε, depth, split criterion and selection."""

    epsilon: Fraction
    max_depth: int
    criterion: str = "max"
    selection: str = "noisy_argmax"


@dataclass(frozen=True, slots=True)
class LevelRecord:
    """Audit record of one script sent: its SQL, ε, and sensitivity (engine's and assumed)."""

    depth: int | None  # None for the leaf-label script
    sql: str
    epsilon: Fraction
    sensitivity: Fraction
    expected_sensitivity: int
    statements: int
    nodes: int
    withheld: int = 0  # splits chosen but not made: their children passed max_nodes


def grow(source: CountSource, schema: Schema, roots: Sequence[Node], settings: GrowthSettings,
         rng: np.random.Generator) -> list[LevelRecord]:
    """Grow the trees under ``roots`` in place and label their leaves; return the audit log.

    Every node at a depth holds leaves below it, so keeping the leaves within ``max_nodes``
    keeps every script within what the engine releases: a split that would pass it is not
    made (post-processing of what was released; the record counts it).
    """
    records: list[LevelRecord] = []
    share = level_epsilon(settings.epsilon, settings.max_depth)
    spent = Fraction(0)
    active = list(roots)
    room = max_nodes(schema) - len(roots)  # leaves that splits may still add
    for depth in range(settings.max_depth):
        if not active:
            break
        paths = {i: _path(node) for i, node in enumerate(active)}
        statements = level_statements(schema, paths,
                                      {i: node.candidates for i, node in enumerate(active)})
        release = source.release(schema, statements, share)
        spent += share
        tables = _node_tables(len(active), statements, release)
        _absorb_level(active, tables, schema, release)
        growing, withheld = [], 0
        for node, node_tables in zip(active, tables, strict=True):
            children = _split(node, node_tables, release, schema, settings, rng, room, share)
            if children is None:
                withheld += 1
                continue
            growing += children
            if node.split is not None:
                room -= node.split.size - 1
        records.append(_record(depth, statements, release, share, len(active),
                               schema.neighbouring, withheld))
        active = growing
    leaves = [node for root in roots for node in root.walk() if node.is_leaf]
    statement = class_statement(schema, {i: _path(leaf) for i, leaf in enumerate(leaves)})
    release = source.release(schema, [statement], settings.epsilon - spent)
    records.append(_record(None, [statement], release, settings.epsilon - spent, len(leaves),
                           schema.neighbouring))
    for leaf, counts in zip(leaves, release.tables[0], strict=True):
        leaf.absorb(counts, release.cell_variance)
    for root in roots:
        set_probabilities(root, len(schema.classes))
    return records


def _path(node: Node) -> Path:
    return Path(path_predicate(node.conditions), node.part)


def _record(depth: int | None, statements: Sequence[CountStatement], release: Release,
            epsilon: Fraction, nodes: int, neighbouring: str, withheld: int = 0) -> LevelRecord:
    return LevelRecord(depth=depth, sql=release.sql, epsilon=epsilon,
                       sensitivity=release.sensitivity,
                       expected_sensitivity=expected_sensitivity(len(statements), neighbouring),
                       statements=len(statements), nodes=nodes, withheld=withheld)


def _node_tables(nodes: int, statements: Sequence[CountStatement],
                 release: Release) -> list[dict[str | None, np.ndarray]]:
    """Each active node's part of the level's tables, by attribute name (None: the class
    statement), in one pass: looking each node up in each statement's nodes took
    nodes² × statements steps (minutes for a 10,000-tree forest)."""
    found: list[dict[str | None, np.ndarray]] = [{} for _ in range(nodes)]
    for statement, table in zip(statements, release.tables, strict=True):
        name = None if statement.attribute is None else statement.attribute.name
        for row, node in enumerate(statement.nodes):
            found[node][name] = table[row]
    return found


def _absorb_level(active: Sequence[Node], tables: Sequence[dict[str | None, np.ndarray]],
                  schema: Schema, release: Release) -> None:
    # Every statement of the level estimates each covered node's class counts: the class
    # statement directly, an attribute table by summing its values (variance × domain size).
    for node, node_tables in zip(active, tables, strict=True):
        for name, table in node_tables.items():
            if name is None:
                node.absorb(table, release.cell_variance)
            else:
                node.absorb(table.sum(axis=0),
                            release.cell_variance * schema.attribute(name).size)


def _split(node: Node, tables: dict[str | None, np.ndarray], release: Release, schema: Schema,
           settings: GrowthSettings, rng: np.random.Generator, room: int,
           share: Fraction) -> list[Node] | None:
    """Split ``node`` if some attribute clears the stopping tests; return the children that
    may split further (the others are leaves already), or None where the split chosen would
    add more than ``room`` leaves (the node stays a leaf)."""
    cell_std = cell_noise_std(release.scale)
    node.gains = {name: debiased_gain(table, settings.criterion, release.scale, rng)
                  for name, table in tables.items()
                  if name is not None
                  and _is_splittable(node, schema.attribute(name), schema, cell_std)}
    # Split only when the best improvement is larger than one cell's noise: below that the
    # ranking of attributes is noise (with exact counts: only when something improves).
    if not node.gains or max(node.gains.values()) <= max(cell_std, GAIN_TOLERANCE):
        return []
    chosen = choose(node.gains, selection=settings.selection, criterion=settings.criterion,
                    epsilon=float(share / max(release.sensitivity, 1)),
                    node_size=node.size, rng=rng)
    attribute = schema.attribute(chosen)
    if attribute.size - 1 > room:
        return None
    node.split = attribute
    remaining = tuple(name for name in node.candidates if name != chosen)
    growing = []
    for value in range(attribute.size):
        child = Node(depth=node.depth + 1,
                     conditions=node.conditions + (attribute.predicate_sql(value),),
                     candidates=remaining, label=f"{attribute.name} = {attribute.label(value)}",
                     part=node.part)
        child.absorb(tables[chosen][value], release.cell_variance)
        node.children.append(child)
        # A child too small for any attribute at this level's noise is a leaf right away:
        # its rows then skip the next level script (fewer statements, less noise for others).
        child.candidates = tuple(name for name in remaining if _is_splittable(
            child, schema.attribute(name), schema, cell_std))
        if child.candidates and child.depth < settings.max_depth:
            growing.append(child)
    return growing


def _is_splittable(node: Node, attribute: Attribute, schema: Schema, cell_std: float) -> bool:
    return is_splittable(node.size, attribute.size, len(schema.classes), cell_std)
