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
    class_statement,
    level_statements,
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


def grow(source: CountSource, schema: Schema, roots: Sequence[Node], settings: GrowthSettings,
         rng: np.random.Generator) -> list[LevelRecord]:
    """Grow the trees under ``roots`` in place and label their leaves; return the audit log."""
    records: list[LevelRecord] = []
    share = level_epsilon(settings.epsilon, settings.max_depth)
    spent = Fraction(0)
    active = list(roots)
    for depth in range(settings.max_depth):
        if not active:
            break
        paths = {i: path_predicate(node.conditions) for i, node in enumerate(active)}
        statements = level_statements(schema, paths,
                                      {i: node.candidates for i, node in enumerate(active)})
        release = source.release(schema, statements, share)
        spent += share
        records.append(_record(depth, statements, release, share, len(active),
                               schema.neighbouring))
        _absorb_level(active, statements, release)
        active = [child for i, node in enumerate(active)
                  for child in _split(node, i, statements, release, schema, settings, rng)]
    leaves = [node for root in roots for node in root.walk() if node.is_leaf]
    statement = class_statement(schema, {i: path_predicate(leaf.conditions)
                                         for i, leaf in enumerate(leaves)})
    release = source.release(schema, [statement], settings.epsilon - spent)
    records.append(_record(None, [statement], release, settings.epsilon - spent, len(leaves),
                           schema.neighbouring))
    for leaf, counts in zip(leaves, release.tables[0], strict=True):
        leaf.absorb(counts, release.cell_variance)
    for root in roots:
        set_probabilities(root, len(schema.classes))
    return records


def _record(depth: int | None, statements: Sequence[CountStatement], release: Release,
            epsilon: Fraction, nodes: int, neighbouring: str) -> LevelRecord:
    return LevelRecord(depth=depth, sql=release.sql, epsilon=epsilon,
                       sensitivity=release.sensitivity,
                       expected_sensitivity=expected_sensitivity(len(statements), neighbouring),
                       statements=len(statements), nodes=nodes)


def _absorb_level(active: Sequence[Node], statements: Sequence[CountStatement],
                  release: Release) -> None:
    # Every statement of the level estimates each covered node's class counts: the class
    # statement directly, an attribute table by summing its values (variance × domain size).
    for statement, table in zip(statements, release.tables, strict=True):
        for row, node_id in enumerate(statement.nodes):
            if statement.attribute is None:
                active[node_id].absorb(table[row], release.cell_variance)
            else:
                active[node_id].absorb(table[row].sum(axis=0),
                                       release.cell_variance * statement.attribute.size)


def _split(node: Node, node_id: int, statements: Sequence[CountStatement], release: Release,
           schema: Schema, settings: GrowthSettings, rng: np.random.Generator) -> list[Node]:
    """Split ``node`` if some attribute clears the stopping tests; return the children that
    may split further (the others are leaves already)."""
    cell_std = cell_noise_std(release.scale)
    tables = {statement.attribute.name: table[statement.nodes.index(node_id)]
              for statement, table in zip(statements, release.tables, strict=True)
              if statement.attribute is not None and node_id in statement.nodes}
    node.gains = {name: debiased_gain(table, settings.criterion, release.scale, rng)
                  for name, table in tables.items()
                  if _is_splittable(node, schema.attribute(name), schema, cell_std)}
    # Split only when the best improvement is larger than one cell's noise: below that the
    # ranking of attributes is noise (with exact counts: only when something improves).
    if not node.gains or max(node.gains.values()) <= max(cell_std, GAIN_TOLERANCE):
        return []
    chosen = choose(node.gains, selection=settings.selection, criterion=settings.criterion,
                    epsilon=float(release.epsilon / max(release.sensitivity, 1)),
                    node_size=node.size, rng=rng)
    attribute = schema.attribute(chosen)
    node.split = attribute
    remaining = tuple(name for name in node.candidates if name != chosen)
    growing = []
    for value in range(attribute.size):
        child = Node(depth=node.depth + 1,
                     conditions=node.conditions + (attribute.predicate_sql(value),),
                     candidates=remaining, label=f"{attribute.name} = {attribute.label(value)}")
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
