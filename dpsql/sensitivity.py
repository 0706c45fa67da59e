"""L1 sensitivity of each noised part, from the metadata and the neighbouring relation.

One person's rows form a vector over the output cells. With contribution bounding each
person touches at most L0 = min(max_groups_per_unit, |domain|) cells and at most
L∞ = max_rows_per_group rows per cell (row privacy: L0 = L∞ = 1). ``docs/sensitivity.md``
derives every formula; ``sensitivity-cases.md`` lists the reference values.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from dpsql.catalog import TableSpec
from dpsql.compile.disjoint import Prover, guard

PARTITIONED_ROLES = ("count", "sum", "sumsq")


def contribution_bounds(table: TableSpec, domain_size: int | None) -> tuple[int, int]:
    """(L0, L∞) for a query: groups one person may touch and rows per group."""
    if table.is_row_privacy:
        return 1, 1
    groups = table.max_groups_per_unit
    if domain_size is not None:
        groups = min(groups, domain_size)
    return groups, table.max_rows_per_group


def person_rows(table: TableSpec, *, grouped: bool, domain_size: int | None) -> int:
    """Rows one person can add to a statement: L0·L∞ (scalar L∞), capped by max_rows_per_unit."""
    l0, linf = contribution_bounds(table, domain_size)
    rows = l0 * linf if grouped else linf
    if table.max_rows_per_unit is not None and not table.is_row_privacy:
        rows = min(rows, table.max_rows_per_unit)
    return rows


def count_sensitivity(table: TableSpec, *, grouped: bool, domain_size: int | None,
                      neighbouring: str) -> Fraction:
    """COUNT(*) / COUNT(col): add/remove R = L0·L∞ rows (scalar L∞), replace 2·R (scalar L∞).

    R is capped by ``max_rows_per_unit`` when the table declares it.
    """
    rows = person_rows(table, grouped=grouped, domain_size=domain_size)
    if not grouped:
        return Fraction(rows)
    return Fraction((2 if neighbouring == "replace" else 1) * rows)


def distinct_unit_sensitivity(table: TableSpec, *, grouped: bool, domain_size: int | None,
                              neighbouring: str) -> Fraction:
    """COUNT(DISTINCT unit): add/remove L0 (scalar 1); replace 2·L0 (scalar 1)."""
    l0, _ = contribution_bounds(table, domain_size)
    if not grouped:
        return Fraction(1)
    return Fraction((2 if neighbouring == "replace" else 1) * l0)


def distinct_values_sensitivity(table: TableSpec, *, grouped: bool, domain_size: int | None,
                                neighbouring: str) -> Fraction:
    """COUNT(DISTINCT x) of a row-level x: add/remove min(R, L0·L∞) (scalar min(R, L∞));
    replace twice that grouped, min(R, L∞) scalar; row privacy 1 (grouped replace 2).

    The exact value of a group is the number of distinct non-NULL values of x among the
    values the persons keep there: each person keeps at most L∞ of their distinct values of x
    per group (the least keyed hashes, under the release's secret salt), in at most L0 groups
    (keyed hash too), and with R at most R values in all (``compile.per_person.
    distinct_values``). What a person keeps depends on their own rows only. So adding a person
    with kept values V_g in group g turns the group's set of classes S into S ∪ V_g, whose
    count grows by at most |V_g| ≤ L∞ (and never shrinks); summed over the groups the change
    is at most Σ_g |V_g| ≤ min(R, L0·L∞). This holds for whatever equality the backend's
    DISTINCT uses (NaN, −0.0, collations): each kept value adds at most one class.
    Replacing p by q removes p's values (each group loses between 0 and |V_g(p)| classes)
    and adds q's (gains between 0 and |V_g(q)|): grouped, the ℓ1 change is at most
    |V(p)| + |V(q)| ≤ 2·min(R, L0·L∞); scalar, the count moves by at most
    max(|V(p)|, |V(q)|) ≤ min(R, L∞), since the loss and the gain have opposite signs.
    Under row privacy a person is one row, one value: 1 (grouped replace 2). A per-person
    subquery has one row per person: L∞ = 1. These are the COUNT(*) formulas, with L∞
    distinct values for L∞ rows.
    """
    return count_sensitivity(table, grouped=grouped, domain_size=domain_size,
                             neighbouring=neighbouring)


def sum_sensitivity(table: TableSpec, lower: Fraction, upper: Fraction, *, grouped: bool,
                    domain_size: int | None, neighbouring: str,
                    droppable: bool = True) -> Fraction:
    """SUM of values clamped to [lower, upper].

    add/remove: L0·L∞·M with M = max(|lower|, |upper|) (scalar L∞·M). replace, grouped:
    2·L0·L∞·M, because the old value leaves one cell and the new one enters another.
    replace, scalar: L∞·(max(U, 0) − min(L, 0)) (row privacy: L∞ = 1). This is U − L when
    L ≤ 0 ≤ U; otherwise a row that a WHERE or a NULL drops out of the sum moves it by up to
    max(|L|, |U|), which U − L would under-state. When no row can drop out (a value that is
    never NULL, no WHERE, no join that can lose the row) and each person is one row, both
    sides contribute one value in [L, U]: U − L.
    """
    rows = person_rows(table, grouped=grouped, domain_size=domain_size)
    magnitude = max(abs(lower), abs(upper))
    if neighbouring == "replace":
        if grouped:
            return 2 * rows * magnitude
        if not droppable and table.is_row_privacy:
            return upper - lower
        # a replaced row may fall out of the sum (a WHERE, a NULL value), so each side
        # contributes a value in {0} ∪ [L, U]: U − L only when 0 lies in [L, U]
        return rows * (max(upper, Fraction(0)) - min(lower, Fraction(0)))
    return rows * magnitude


def filter_classes(measured: Sequence[tuple[str, object]], *, grouped: bool,
                   neighbouring: str) -> tuple[tuple[int, ...], ...]:
    """A statement's FILTER partition: its counts, sums and sums of squares (``measured``:
    (role, IR input) of each measurement, in order) in classes whose FILTER conditions no
    row meets together (``compile.disjoint``), the positions of each class, when there are
    two or more; () otherwise. Every other measurement is in no class.

    Privacy. Each of a person's rows lies in at most one class. Every partial of a person's
    (person, cell) pair is scaled by one factor, L∞ over their rows in the cell (and all
    their partials by R over their kept rows: ``compile.per_person``; a snapshot keeps at
    most L∞ rows a cell, row privacy one row a person), so a person's rows act as at most
    L0·L∞ (R) weighted rows over all cells and classes. Measurement i moves by at most its
    per-row bound b_i = Δ_i/(F·R) (``sensitivity.py``: F = 2 for grouped replace, else 1)
    per weighted row, so with w_k the share of the person's weighted rows (both sides' under
    replace) in class k, ‖d_i‖₁ ≤ w_k·Δ_i for i in class k and Σ_k w_k ≤ 1. Laplace noise
    at ε_i loses ε_i·‖d_i‖₁/Δ_i, so the classes together lose Σ_k w_k·Σ_{i∈k} ε_i ≤
    max_k Σ_{i∈k} ε_i: each class may spend the partition's whole share, as the cells of a
    GROUP BY do, whether or not a person's rows all fall in one class (columns of one value
    a person), and whether or not the data keep to the metadata. Without GROUP BY under
    replace the old and the new person may fall in two classes, each changing its class by
    up to Δ_i (whose scalar form counts one side), so there is no partition there. COUNT
    (DISTINCT) and quantiles are bounded otherwise and are never in a class."""
    if neighbouring == "replace" and not grouped:
        return ()
    guarded = [(i, condition) for i, (role, arg) in enumerate(measured)
               if role in PARTITIONED_ROLES and (condition := guard(arg)) is not None]
    conditions: list = []  # distinct conditions (compared, never hashed), and each one's
    of = {}
    for i, condition in guarded:
        found = next((k for k, c in enumerate(conditions) if c == condition), None)
        if found is None:
            found = len(conditions)
            conditions.append(condition)
        of[i] = found
    # components of "some row may meet both" (``Prover``: unsure past its steps, is yes)
    component = list(range(len(conditions)))

    def root(k: int) -> int:
        while component[k] != k:
            k = component[k]
        return k

    prover = Prover()
    for a in range(len(conditions)):
        for b in range(a):
            if root(a) != root(b) and not prover.disjoint(conditions[a], conditions[b]):
                component[root(a)] = root(b)
    classes: dict[int, list[int]] = {}
    for i, _ in guarded:
        classes.setdefault(root(of[i]), []).append(i)
    return tuple(map(tuple, classes.values())) if len(classes) > 1 else ()


def partitioned_loss(epsilons: Sequence[Fraction], classes: tuple[tuple[int, ...], ...]
                     ) -> Fraction:
    """The ε a statement's measurements at ``epsilons`` (0 for one it does not pay) lose
    together: the sum over those in no class, plus the most any class of its FILTER
    partition spends (``filter_classes``)."""
    inside = {i for members in classes for i in members}
    return sum((e for i, e in enumerate(epsilons) if i not in inside), Fraction(0)) + max(
        (sum((epsilons[i] for i in members), Fraction(0)) for members in classes),
        default=Fraction(0))
