"""Re-identification risk of a released table (El Emam & Dankar; notes §6), as GROUP BY SQL.

The release is grouped by its published QID tuple only: the pass number of a ρ-Gain release
is not published, so identical tuples from different passes are one class for an attacker
(notes §12.9 pitfall 9). Without a population table, journalist risk equals prosecutor risk
and marketer risk is the average prosecutor risk, as in ARX's reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import duckdb
from sqlglot import exp

import dpsql


@dataclass(frozen=True)
class RiskProfile:
    """Prosecutor, journalist and marketer risks and sample uniqueness of one release."""

    records: int
    classes: int
    max_prosecutor_risk: float  # R_b = 1 / min f_j
    avg_prosecutor_risk: float  # R_c = |J| / n
    records_at_max_risk: float  # share of records in the smallest classes
    records_above_threshold: float  # R_a(τ): share of records with 1/f_j > τ
    sample_uniqueness: float  # U_1: share of records in classes of size 1
    max_journalist_risk: float
    marketer_risk: float
    threshold: float

    def as_dict(self) -> dict:
        """Plain dict for JSON output."""
        return asdict(self)


def risk_profile(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    qids: Sequence[str],
    *,
    threshold: float = 0.2,
    population: str | None = None,
) -> RiskProfile:
    """Risks of ``relation`` grouped by ``qids``.

    Args:
        relation: the released table (or a subquery in parentheses).
        threshold: τ of R_a, the share of records whose risk 1/f_j exceeds τ.
        population: optional relation with the same generalized QIDs holding the population the
            release was sampled from; journalist and marketer risks then use its class sizes F_j.

    Raises:
        DataError: the release has no rows.
    """
    keys = ", ".join(exp.column(q, quoted=True).sql("duckdb") for q in qids)
    classes = f"SELECT {keys}, COUNT(*) AS f FROM {relation} GROUP BY ALL"
    if population is None:
        joined = f"SELECT f, f AS big_f FROM ({classes})"
    else:
        pop = f"SELECT {keys}, COUNT(*) AS big_f FROM {population} GROUP BY ALL"
        joined = f"SELECT c.f, p.big_f FROM ({classes}) c JOIN ({pop}) p USING ({keys})"
    row = con.execute(
        f"""WITH c AS ({joined}), m AS (SELECT MIN(f) AS mn FROM c)
        SELECT SUM(f), COUNT(*), 1.0 / MIN(f), COUNT(*) / SUM(f),
               SUM(f) FILTER (WHERE f = (SELECT mn FROM m)) / SUM(f),
               COALESCE(SUM(f) FILTER (WHERE 1.0 / f > {float(threshold)!r}), 0) / SUM(f),
               COALESCE(SUM(f) FILTER (WHERE f = 1), 0) / SUM(f),
               1.0 / MIN(big_f), SUM(f / big_f) / SUM(f)
        FROM c"""
    ).fetchone()
    if row[0] is None:
        raise dpsql.DataError(f"release {relation} has no rows")
    return RiskProfile(
        records=int(row[0]), classes=int(row[1]), max_prosecutor_risk=float(row[2]),
        avg_prosecutor_risk=float(row[3]), records_at_max_risk=float(row[4]),
        records_above_threshold=float(row[5]), sample_uniqueness=float(row[6]),
        max_journalist_risk=float(row[7]), marketer_risk=float(row[8]), threshold=threshold,
    )
