"""Privacy models: k-anonymity, ℓ-diversity (distinct, entropy, recursive) and t-closeness (EMD).

Each model is checked two ways that must agree: as SQL over a generalized table (``class_sql``,
the reference used for published tables and for reporting the achieved k, ℓ, t of any table)
and as vector checks on a class table of counts (``PrivacyModel.check``, the kernel of the
lattice search, where thousands of nodes are checked). Formulas follow the ρ-Gain notes §3
with the corrected forms: equal-distance EMD uses |p − q|, recursive (c, ℓ) uses r_ℓ..r_m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import duckdb
import numpy as np
import pandas as pd
from sqlglot import exp

import dpsql
from evaluators.anonymization import kernels
from evaluators.anonymization.hierarchies import Hierarchy

L_VARIANTS = ("distinct", "entropy", "recursive")
T_VARIANTS = ("equal", "ordered", "hierarchical")
_TOLERANCE = 1e-9  # EMDs are sums of floats: compare d <= t with slack (notes §12.9 pitfall 8)


@dataclass(frozen=True)
class SensitiveDomain:
    """The sensitive attribute's ordered values, reference distribution and hierarchy codes.

    ``tree[L][j]`` is the level-L node of value j (``tree[0]`` is ``0..m-1``); only hierarchical
    EMD reads it.
    """

    attribute: str
    values: tuple[str, ...]
    reference: np.ndarray
    tree: tuple[np.ndarray, ...] = ()

    @cached_property
    def parents(self) -> np.ndarray:
        """Row L−1: the level-L parent of each level-(L−1) node (padded to m columns), built
        once: hierarchical EMD is computed for every class of every node searched."""
        rows = np.zeros((max(len(self.tree) - 1, 0), len(self.values)), dtype=np.int64)
        for level in range(1, len(self.tree)):
            rows[level - 1, self.tree[level - 1]] = self.tree[level]
        return rows

    @cached_property
    def largest_emds(self) -> dict[str, float]:
        """Per EMD variant, the largest EMD any distribution has to the reference: a point
        mass's (the EMD is convex, so its maximum over the simplex is at a vertex)."""
        variants = T_VARIANTS if len(self.tree) >= 2 else T_VARIANTS[:2]
        point_masses = np.eye(len(self.values), dtype=np.int64)
        return {v: float(emd(point_masses, self, v).max()) for v in variants}


@dataclass(frozen=True)
class PrivacyModel:
    """A combination of k-anonymity, one ℓ-diversity variant and one t-closeness variant."""

    k: int = 1
    l: float | None = None
    l_variant: str = "distinct"
    c: float | None = None
    t: float | None = None
    t_variant: str = "equal"

    def __post_init__(self) -> None:
        if self.k < 1:
            raise dpsql.ProgrammingError(f"k must be at least 1, got {self.k}",
                                         hint="pass k ≥ 1 (--k)")
        if self.l_variant not in L_VARIANTS:
            raise dpsql.ProgrammingError(
                f"unknown ℓ-diversity variant {self.l_variant!r}", hint=f"use one of {L_VARIANTS}"
            )
        if self.t_variant not in T_VARIANTS:
            raise dpsql.ProgrammingError(
                f"unknown t-closeness variant {self.t_variant!r}", hint=f"use one of {T_VARIANTS}"
            )
        if self.l is not None and not self.l >= 1:  # NaN too
            raise dpsql.ProgrammingError(f"ℓ must be at least 1, got {self.l}",
                                         hint="pass ℓ ≥ 1 (--l)")
        if self.l_variant == "recursive" and self.l is not None and self.c is None:
            raise dpsql.ProgrammingError("recursive (c, ℓ)-diversity needs c", hint="pass c > 0")
        if self.c is not None and (self.l_variant != "recursive" or self.l is None):
            # it was ignored: a run with --c 2 alone checked k only, and said nothing
            raise dpsql.ProgrammingError(
                "c is the c of recursive (c, ℓ)-diversity, which this model does not check",
                hint="pass --l L --l-variant recursive with --c, or leave out --c")
        if self.c is not None and not self.c > 0:
            raise dpsql.ProgrammingError(f"c must be greater than 0, got {self.c}",
                                         hint="pass c > 0 (--c)")
        if self.t is not None and not 0 <= self.t <= 1:
            raise dpsql.ProgrammingError(f"t must be in [0, 1], got {self.t}",
                                         hint="pass t in [0, 1] (--t)")

    @property
    def needs_sensitive(self) -> bool:
        """True when ℓ-diversity or t-closeness is on (a sensitive attribute is required)."""
        return self.l is not None or self.t is not None

    def check(self, counts: np.ndarray,
              domain: SensitiveDomain | None) -> tuple[np.ndarray, np.ndarray]:
        """Per class of a classes × sensitive-values count matrix: whether it satisfies the
        model, and a lower bound on its records suppressed at every predecessor node.

        A predecessor splits each class into parts. A part of a class with fewer than k records
        or fewer than ℓ distinct sensitive values has too few too, so the whole class stays
        suppressed. Entropy ℓ and t-closeness can hold for a part but not the whole, yet not
        for all parts: entropy is concave and every EMD convex in the distribution (a class is
        the size-weighted mixture of its parts), so the parts that pass can hold only so many
        records (``_failing_share``). Recursive (c, ℓ)-diversity adds nothing to the bound.
        """
        n = counts.sum(axis=1)
        ok = n >= self.k
        whole = ~ok
        share = None
        if self.l is not None:
            entropy = class_entropy(counts) if self.l_variant == "entropy" else None
            ok &= l_diversity_ok(counts, self.l, self.l_variant, self.c, entropy)
            if self.l_variant == "distinct":
                whole |= ~ok
            elif entropy is not None:
                # n·H ≥ Σ_parts n_j·H_j ≥ (records passing)·log ℓ, and H_j ≥ 0 if failing.
                share = _failing_share(-entropy, -math.log(self.l), 0.0)
        if self.t is not None:
            distance = emd(counts, domain, self.t_variant)
            ok &= distance <= self.t + _TOLERANCE
            # n·d ≤ Σ_parts n_j·d_j ≤ (records passing)·t + (records failing)·(largest EMD).
            tail = _failing_share(distance, self.t, domain.largest_emds[self.t_variant])
            share = tail if share is None else np.maximum(share, tail)
        if share is None:
            return ok, np.where(whole, n, 0)
        # Float slack: a bound one record too high could prune the optimum.
        part = np.minimum(np.maximum(np.ceil(n * share - 1e-6), 0).astype(np.int64), n)
        return ok, np.where(whole, n, part)


def _failing_share(score: np.ndarray, limit: float, worst: float) -> np.ndarray:
    """Least share of a class's records in failing parts when a part passes at ``score ≤ limit``,
    any part scores at most ``worst`` and the class's score is at most the parts' weighted mean:
    (score − limit) / (worst − limit), with twice the checks' float slack on ``limit``."""
    limit += 2 * _TOLERANCE
    if worst <= limit:
        return np.zeros(len(score))
    return np.clip((score - limit) / (worst - limit + _TOLERANCE), 0.0, 1.0)


def l_diversity_ok(counts: np.ndarray, l: float, variant: str, c: float | None,
                   entropy: np.ndarray | None = None) -> np.ndarray:
    """Per-class ℓ-diversity of a classes × values count matrix (``entropy``: the classes'
    ``class_entropy`` when already computed)."""
    if variant == "distinct":
        return (counts > 0).sum(axis=1) >= l
    if variant == "entropy":
        entropy = class_entropy(counts) if entropy is None else entropy
        return entropy >= math.log(l) - _TOLERANCE
    ordered = -np.sort(-counts, axis=1)
    tail = ordered[:, int(l) - 1:].sum(axis=1)
    return ordered[:, 0] < c * tail


def class_entropy(counts: np.ndarray) -> np.ndarray:
    """Natural-log entropy of each class's sensitive distribution, as log n − Σ c·log c / n
    (one logarithm per cell, none of a ratio)."""
    n = np.maximum(counts.sum(axis=1), 1)
    return np.log(n) - (counts * np.log(np.maximum(counts, 1))).sum(axis=1) / n


def emd(counts: np.ndarray, domain: SensitiveDomain | None, variant: str) -> np.ndarray:
    """Earth mover's distance of each class's distribution to the reference (notes §3.3)."""
    if domain is None:
        raise dpsql.ProgrammingError("t-closeness needs a sensitive attribute")
    if variant == "hierarchical":
        return _hierarchical_emd(counts, domain)
    n = counts.sum(axis=1, keepdims=True)
    extra = counts / np.maximum(n, 1) - domain.reference[None, :]
    if variant == "equal":
        return 0.5 * np.abs(extra).sum(axis=1)
    m = extra.shape[1]
    return np.abs(np.cumsum(extra, axis=1)).sum(axis=1) / max(m - 1, 1)


def _hierarchical_emd(counts: np.ndarray, domain: SensitiveDomain) -> np.ndarray:
    if len(domain.tree) < 2:
        raise dpsql.ProgrammingError(
            "hierarchical EMD needs a hierarchy for the sensitive attribute",
            hint="add <sensitive>.csv to the hierarchies folder or use t_variant='equal'",
        )
    return kernels.hierarchical_emd(np.ascontiguousarray(counts), domain.reference, domain.parents)


def sensitive_domain(
    con: duckdb.DuckDBPyConnection,
    reference_relation: str,
    attribute: str,
    hierarchy: Hierarchy | None = None,
) -> SensitiveDomain:
    """Values (in the column's order), reference distribution and hierarchy codes of the
    sensitive attribute in ``reference_relation``."""
    col = exp.column(attribute, quoted=True)
    # Order by the typed value so that ordered EMD sees numbers in numeric order.
    select = exp.select(exp.cast(col, "VARCHAR").as_("v"), exp.Count(this=exp.Star()).as_("n"))
    select = select.from_(reference_relation).group_by(col.copy()).order_by(col.copy())
    frame = con.execute(select.sql("duckdb")).df()
    values = tuple(frame["v"].astype(str))
    counts = frame["n"].to_numpy(dtype=float)
    tree: tuple[np.ndarray, ...] = ()
    if hierarchy is not None:
        table = dict(_labels_by_value(con, reference_relation, attribute, hierarchy))
        tree = tuple(
            pd.factorize(pd.Series([table[v][level] for v in values]))[0].astype(np.int64)
            for level in range(hierarchy.levels)
        )
    return SensitiveDomain(attribute, values, counts / counts.sum(), tree)


def _labels_by_value(con, relation, attribute, hierarchy):
    col = exp.column(attribute, quoted=True)
    exprs = [hierarchy.expression(col, lv).as_(f"l{lv}") for lv in range(hierarchy.levels)]
    sub = exp.select(col).distinct().from_(relation).subquery("v")
    for row in con.execute(exp.select(*exprs).from_(sub).sql("duckdb")).fetchall():
        yield str(row[0]), tuple(str(x) for x in row)


# ---------------------------------------------------------------- SQL checks over a table


@dataclass(frozen=True)
class AchievedPrivacy:
    """The strongest parameters a table satisfies (over its equivalence classes)."""

    classes: int
    records: int
    k: int
    distinct_l: int | None = None
    entropy_l: float | None = None
    recursive_c: float | None = None  # smallest c with r1 < c·(r_ℓ+…+r_m) needs c > this value
    t_equal: float | None = None
    t_ordered: float | None = None
    t_hierarchical: float | None = None

    def of_model(self, model: PrivacyModel) -> dict:
        """The achieved k, and the ℓ and t in ``model``'s variants (None without a sensitive
        attribute). For recursive (c, ℓ)-diversity ℓ is the model's and c the largest ratio
        r1 / (r_ℓ+…+r_m) of a class, which any c the release satisfies must exceed (None when
        a class has fewer than ℓ values: no c holds)."""
        achieved = {"k": self.k, "l": None, "l_variant": model.l_variant, "c": None,
                    "t": None, "t_variant": model.t_variant}
        if self.distinct_l is None:
            return achieved
        if model.l_variant == "recursive":
            achieved["l"] = recursive_l(model.l)
            achieved["c"] = None if math.isinf(self.recursive_c) else self.recursive_c
        else:
            achieved["l"] = self.entropy_l if model.l_variant == "entropy" else self.distinct_l
        achieved["t"] = getattr(self, f"t_{model.t_variant}")
        return achieved


def recursive_l(l_value: float | None) -> int:
    """The ℓ of recursive (c, ℓ)-diversity as the checks use it: whole, 2 when none is set."""
    return int(l_value or 2)


def class_sql(
    relation: str,
    qids: list[str],
    sensitive: str | None,
    domain: SensitiveDomain | None = None,
    l_recursive: int = 2,
) -> str:
    """One row per equivalence class: QIDs, n, and (with a sensitive attribute) distinct, entropy,
    the recursive-(c, ℓ) ratio r1 / (r_ℓ+…+r_m) and the equal, ordered and hierarchical EMDs."""
    q = [exp.column(c, quoted=True).sql("duckdb") for c in qids]
    keys = ", ".join(q)
    if sensitive is None:
        return f"SELECT {keys}, COUNT(*) AS n FROM {relation} GROUP BY {keys}"
    s = exp.column(sensitive, quoted=True).sql("duckdb")
    ck = f"concat_ws(chr(31), {', '.join(f'CAST({c} AS VARCHAR)' for c in q)})"
    ctes = [
        (f"cls_sa AS (SELECT {ck} AS ck, {keys}, CAST({s} AS VARCHAR) AS sa, COUNT(*) AS c "
         f"FROM {relation} GROUP BY ALL)"),
        "cls AS (SELECT ck, SUM(c) AS n, COUNT(*) AS n_distinct FROM cls_sa GROUP BY ck)",
        ("ent AS (SELECT s.ck, -SUM((s.c / k.n) * ln(s.c / k.n)) AS entropy "
         "FROM cls_sa s JOIN cls k USING (ck) GROUP BY s.ck)"),
        ("rnk AS (SELECT ck, c, row_number() OVER (PARTITION BY ck ORDER BY c DESC, sa) AS r "
         "FROM cls_sa)"),
        (f"rec AS (SELECT ck, MAX(c) FILTER (WHERE r = 1) / NULLIF(SUM(c) FILTER "
         f"(WHERE r >= {int(l_recursive)}), 0) AS recursive_ratio FROM rnk GROUP BY ck)"),
    ]
    selects = ["k.n", "k.n_distinct", "e.entropy", "r.recursive_ratio"]
    joins = ["JOIN ent e USING (ck)", "JOIN rec r USING (ck)"]
    if domain is not None:
        ctes += _emd_ctes(domain)
        selects += ["d.t_equal", "d.t_ordered"]
        joins.append("JOIN emd d USING (ck)")
        if len(domain.tree) >= 2:
            ctes += _hierarchical_emd_ctes(domain)
            selects.append("h.t_hierarchical")
            joins.append("JOIN emd_h h USING (ck)")
    first = "(SELECT DISTINCT ck, " + keys + " FROM cls_sa) z"
    return (
        "WITH " + ",\n".join(ctes)
        + f"\nSELECT {', '.join('z.' + c for c in q)}, {', '.join(selects)} FROM {first} "
        + "JOIN cls k USING (ck) " + " ".join(joins)
    )


def _domain_values_sql(domain: SensitiveDomain) -> str:
    rows = ", ".join(
        f"({exp.Literal.string(v).sql('duckdb')}, {i}, {float(q)!r})"
        for i, (v, q) in enumerate(zip(domain.values, domain.reference))
    )
    return f"dom(sa, i, q) AS (VALUES {rows})"


def _emd_ctes(domain: SensitiveDomain) -> list[str]:
    m = len(domain.values)
    return [
        _domain_values_sql(domain),
        ("grid AS (SELECT k.ck, d.sa, d.i, COALESCE(s.c / k.n, 0) - d.q AS e FROM cls k "
         "CROSS JOIN dom d LEFT JOIN cls_sa s ON s.ck = k.ck AND s.sa = d.sa)"),
        ("cum AS (SELECT ck, e, SUM(e) OVER (PARTITION BY ck ORDER BY i "
         "ROWS UNBOUNDED PRECEDING) AS cs FROM grid)"),
        (f"emd AS (SELECT ck, 0.5 * SUM(abs(e)) AS t_equal, SUM(abs(cs)) / {max(m - 1, 1)} "
         "AS t_ordered FROM cum GROUP BY ck)"),
    ]


def _hierarchical_emd_ctes(domain: SensitiveDomain) -> list[str]:
    height = len(domain.tree) - 1
    labels = ", ".join(
        f"({exp.Literal.string(v).sql('duckdb')}, "
        + ", ".join(str(int(domain.tree[lv][j])) for lv in range(height + 1)) + ")"
        for j, v in enumerate(domain.values)
    )
    names = ", ".join(f"h{lv}" for lv in range(height + 1))
    costs = " UNION ALL ".join(
        f"SELECT ck, {lv / height!r} * least(SUM(greatest(x, 0)), SUM(greatest(-x, 0))) AS cost "
        f"FROM (SELECT ck, h{lv - 1}, h{lv}, SUM(e) AS x FROM hgrid GROUP BY ALL) "
        f"GROUP BY ck, h{lv}"
        for lv in range(1, height + 1)
    )
    return [
        f"tree(sa, {names}) AS (VALUES {labels})",
        "hgrid AS (SELECT * FROM grid JOIN tree USING (sa))",
        f"emd_h AS (SELECT ck, SUM(cost) AS t_hierarchical FROM ({costs}) GROUP BY ck)",
    ]


def achieved_privacy(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    qids: list[str],
    sensitive: str | None = None,
    domain: SensitiveDomain | None = None,
    l_recursive: int = 2,
) -> AchievedPrivacy:
    """The k, ℓ (distinct, entropy), recursive c and t (EMDs) that ``relation`` achieves.

    ``relation`` is any table or subquery whose QID columns are already generalized (for
    example a file anonymized by another tool); every class is taken as published.
    """
    frame = con.execute(class_sql(relation, qids, sensitive, domain, l_recursive)).df()
    if frame.empty:
        raise dpsql.DataError(f"relation {relation} has no rows")
    fields: dict = {"classes": len(frame), "records": int(frame["n"].sum()),
                    "k": int(frame["n"].min())}
    if sensitive is not None:
        fields["distinct_l"] = int(frame["n_distinct"].min())
        fields["entropy_l"] = float(np.exp(frame["entropy"].min()))
        ratio = frame["recursive_ratio"]
        fields["recursive_c"] = math.inf if ratio.isna().any() else float(ratio.max())
        for name in ("t_equal", "t_ordered", "t_hierarchical"):
            if name in frame:
                fields[name] = float(frame[name].max())
    return AchievedPrivacy(**fields)


def model_ok_sql(model: PrivacyModel, class_relation: str) -> str:
    """SQL boolean over a ``class_sql`` row saying whether the class satisfies ``model``."""
    terms = [f"{class_relation}.n >= {model.k}"]
    if model.l is not None:
        if model.l_variant == "distinct":
            terms.append(f"{class_relation}.n_distinct >= {model.l!r}")
        elif model.l_variant == "entropy":
            terms.append(f"{class_relation}.entropy >= {math.log(model.l) - _TOLERANCE!r}")
        else:
            terms.append(f"coalesce({class_relation}.recursive_ratio < {model.c!r}, false)")
    if model.t is not None:
        terms.append(f"{class_relation}.t_{model.t_variant} <= {model.t + _TOLERANCE!r}")
    return " AND ".join(terms)
