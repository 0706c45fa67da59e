"""DiffP-ID3 decision trees and forests grown from DP GROUP BY scripts (``dpsql evaluate tree``).

Every count comes from the dpsql engine, one script per tree level; see ``tree.py`` for the
model, ``budget.py`` for the ε split and ``docs/reports/decision_tree/`` for measurements.
"""

from evaluators.decision_tree.forest import DPRandomForest
from evaluators.decision_tree.tree import DPDecisionTree

__all__ = ["DPDecisionTree", "DPRandomForest"]
