"""Tree nodes: path, released class-count estimate, split, children; prediction and rendering."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from evaluators.decision_tree.attributes import UNKNOWN, Attribute
from evaluators.decision_tree.sql import Part

MIN_LABEL_MASS = 1.0  # a node whose clamped noisy counts sum below one row borrows its parent's


@dataclass(eq=False)
class Node:
    """One node of a DP tree.

    ``counts`` is the node's class-count estimate, an inverse-variance combination of every
    release that covered the node, and ``variance`` the noise variance of each of its cells
    (0 for exact counts). ``children[i]`` holds the rows with value index ``i`` of ``split``.
    In a forest, ``part`` says which rows are its tree's.
    """

    depth: int
    conditions: tuple[str, ...]
    candidates: tuple[str, ...]
    label: str = ""
    part: Part | None = None
    counts: np.ndarray | None = None
    variance: float = math.inf
    split: Attribute | None = None
    children: list[Node] = field(default_factory=list)
    gains: dict[str, float] = field(default_factory=dict)
    proba: np.ndarray | None = None

    @property
    def size(self) -> float:
        """Estimated number of rows (sum of the clamped class counts)."""
        return float(np.clip(self.counts, 0.0, None).sum()) if self.counts is not None else 0.0

    @property
    def is_leaf(self) -> bool:
        """True when the node was not split."""
        return self.split is None

    def absorb(self, estimate: np.ndarray, variance: float) -> None:
        """Combine another unbiased estimate of the class counts (inverse-variance weights)."""
        if self.counts is None or variance == 0.0 or math.isinf(self.variance):
            self.counts, self.variance = np.asarray(estimate, dtype=float), variance
            return
        if self.variance == 0.0:
            return
        weight = self.variance / (self.variance + variance)
        self.counts = weight * estimate + (1.0 - weight) * self.counts
        self.variance = self.variance * variance / (self.variance + variance)

    def walk(self):
        """This node and all its descendants, parents first."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


def set_probabilities(root: Node, classes: int) -> None:
    """Turn every node's noisy counts into class probabilities (post-processing).

    Negative cells are clamped to 0; a node with almost no estimated rows uses its parent's
    probabilities (the root falls back to uniform).
    """
    root.proba = _normalised(root.counts, np.full(classes, 1.0 / classes))
    for node in root.walk():
        for child in node.children:
            child.proba = _normalised(child.counts, node.proba)


def _normalised(counts: np.ndarray | None, fallback: np.ndarray) -> np.ndarray:
    if counts is None:
        return fallback
    clamped = np.clip(counts, 0.0, None)
    total = clamped.sum()
    return clamped / total if total >= MIN_LABEL_MASS else fallback


def predict_proba(root: Node, codes: Mapping[str, np.ndarray], rows: int) -> np.ndarray:
    """Class probabilities of encoded rows: each row goes down to the deepest matching node.

    A row whose value is outside the public domain stops at the node that splits on it.
    """
    out = np.empty((rows, len(root.proba)))
    stack = [(root, np.arange(rows))]
    while stack:
        node, index = stack.pop()
        if node.is_leaf or index.size == 0:
            out[index] = node.proba
            continue
        values = codes[node.split.name][index]
        out[index[values == UNKNOWN]] = node.proba
        stack.extend((child, index[values == i]) for i, child in enumerate(node.children))
    return out


def render(root: Node, classes: tuple, target: str) -> str:
    """A readable text tree: each line is a path step, estimated size and class shares."""
    lines = [f"[{root.label}] {target}: {_summary(root, classes)}"]

    def visit(node: Node, prefix: str) -> None:
        for i, child in enumerate(node.children):
            last = i == len(node.children) - 1
            lines.append(f"{prefix}{'└── ' if last else '├── '}{child.label}: "
                         f"{_summary(child, classes)}")
            visit(child, prefix + ("    " if last else "│   "))

    visit(root, "")
    return "\n".join(lines)


def _summary(node: Node, classes: tuple) -> str:
    best = int(np.argmax(node.proba))
    shares = ", ".join(f"{c} {p:.2f}" for c, p in zip(classes, node.proba, strict=True))
    return f"predict {classes[best]} ({shares}; n≈{node.size:.0f})"
