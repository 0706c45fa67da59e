"""Class-based utility of a released table (C_AVG/ESO, discernibility), as GROUP BY SQL.

Suppressed records are not in the release, so the caller passes the input size N; they form
one outlier class (ARX "including outliers", notes §9.2) that costs N per record in DM.
Cell-based metrics (loss, precision, entropy) depend on the hierarchy levels and are computed
per lattice node in ``objectives``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import duckdb
from sqlglot import exp


@dataclass(frozen=True)
class UtilitySummary:
    """Classes and class sizes of a release of ``records`` input records."""

    records: int
    published: int
    suppressed: int
    classes: int
    avg_class_size: float  # N / (#classes + 1 if any suppressed): the thesis's ESO
    avg_class_size_published: float  # published / #classes: ARX "excluding outliers"
    dm: float
    min_class: int | None
    max_class: int | None

    def as_dict(self) -> dict:
        """Plain dict for JSON output."""
        return asdict(self)


def utility_summary(
    con: duckdb.DuckDBPyConnection, relation: str, class_columns: Sequence[str], records: int
) -> UtilitySummary:
    """Utility of ``relation`` whose classes are the distinct ``class_columns`` tuples.

    Example:
        >>> import duckdb
        >>> con = duckdb.connect()
        >>> _ = con.execute("CREATE TABLE r AS FROM (VALUES ('a'), ('a'), ('b'), ('b')) t(q)")
        >>> s = utility_summary(con, "r", ["q"], records=5)
        >>> (s.classes, s.suppressed, s.avg_class_size, s.dm)
        (2, 1, 1.6666666666666667, 13.0)
    """
    keys = ", ".join(exp.column(c, quoted=True).sql("duckdb") for c in class_columns)
    row = con.execute(
        f"SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(SUM(n * n), 0), MIN(n), MAX(n) "
        f"FROM (SELECT {keys}, COUNT(*) AS n FROM {relation} GROUP BY ALL)"
    ).fetchone()
    classes, published, squares, smallest, largest = row
    suppressed = records - int(published)
    return UtilitySummary(
        records=records,
        published=int(published),
        suppressed=suppressed,
        classes=int(classes),
        avg_class_size=records / max(classes + (suppressed > 0), 1),
        avg_class_size_published=published / classes if classes else 0.0,
        dm=float(squares) + records * suppressed,
        min_class=None if smallest is None else int(smallest),
        max_class=None if largest is None else int(largest),
    )
