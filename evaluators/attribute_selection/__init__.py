"""DP attribute selection by chi-squared and information gain (Var & İnan), as DP SQL.

``select_attributes(connection, table, class_column, metadata=..., method=..., epsilon=...)``
releases every attribute x class table in one script and ranks the attributes; the CLI is
``dpsql evaluate attribute-selection``.
"""

from evaluators.attribute_selection.selection import (
    AttributeSelection,
    select_attributes,
    select_exact,
    select_from_release,
)

__all__ = ["AttributeSelection", "select_attributes", "select_exact", "select_from_release"]
