"""A DP plan (``Connection.explain``'s dict) as the text lines people read: what ``dpsql
explain`` prints and a server's ``EXPLAIN`` returns as rows, one rendering for both."""

from __future__ import annotations


def lines(plan: dict, left: str | None, unit: str = "script") -> list[str]:
    """The plan's cost and whether it fits what is ``left`` of the budget (None: the
    metadata declares none), then each statement's sensitivity, groups, bounds and each noised
    part's Δ, ε, mechanism, scale and 95% error, its joint draws, snapshot and SQL.
    ``unit``: what the plan's ε is for (the script, a server's one statement)."""
    budget = "budget: the metadata declares none, so any ε fits" if left is None else \
        f"budget: {left} remaining; this request " + \
        ("fits" if plan["fits_budget"] else "does NOT fit (it would be refused)")
    head = f"dataset {plan['dataset']}, neighbouring {plan['neighbouring']}, ε " \
        f"{plan['epsilon']:g} for the {unit}, total L1 sensitivity {plan['total_sensitivity']}"
    out = [head, budget]
    for index, statement in enumerate(plan["statements"], 1):
        out += ["", f"-- statement {index}: {statement['sql']}"]
        if statement.get("public"):
            out.append("   public tables only: exact, no noise, no cost")
            continue
        out.append(f"   sensitivity {statement['sensitivity']}, ε {statement['epsilon']:g}, "
                   f"{statement['groups']} group(s)")
        if statement.get("contribution"):
            out.append("   " + statement["contribution"]["note"])
        out += _parts(statement["aggregates"])
        if statement.get("filter_partition"):
            out += _partition(statement["filter_partition"])
        if "snapshot" in statement:
            out += [("   reads a bounded snapshot (persons bounded once, before WHERE), made "
                    "if absent by:"), f"     {statement['snapshot']}"]
        shown = ([("rewritten", statement["rewritten"])] if "rewritten" in statement else []) \
            + [(f"histogram of {column}", sql)
               for column, sql in statement.get("histograms", {}).items()]
        for label, sql in shown:
            out.append(f"   {label}:")
            out += ["     " + line for line in sql.splitlines()]
    return out


def _parts(parts: list[dict]) -> list[str]:
    """A line per noised part, then a line per block of measurements drawn together."""
    # each block in order, as (its measurements, its joint draw)
    blocks = list({tuple(p["joint"]["measurements"]): p["joint"]
                   for p in parts if p.get("joint")}.items())
    labels = {key: "ℓ∞" if len(blocks) == 1 else f"ℓ∞ {n}"
              for n, (key, _) in enumerate(blocks, 1)}
    out = []
    for part in parts:
        shown = "" if part.get("paid", True) else f"  (shown from {part['shared']}: no ε)"
        if part.get("joint"):
            shown += f"  ({labels[tuple(part['joint']['measurements'])]})"
        if part.get("filter_class"):
            shown += f"  (FILTER class {part['filter_class']})"
        error = f"95% error ±{part['ci95_half_width']:.4g}" if part["part"] != "quantile" \
            else f"95% rank error ±{part['rank_error_95']:.4g} rows"
        out.append(f"   {part['aggregate']:<28} {part['part']:<8} Δ={part['sensitivity']:<10g}"
                   f" ε={part['epsilon']:<8.4g} {part['mechanism']} "
                   f"scale={part['scale']:<10.4g} {error}{shown}")
    for key, joint in blocks:
        out.append(f"   ({labels[key]}): one joint draw per group of {len(key)} measurements "
                   f"at ε {joint['epsilon']:.4g} in all (the ε shown are its shares); scale: "
                   "the Laplace scale of the same variance")
        others = [m for m in key if m.startswith("statement ")]
        if others:
            out.append(f"   ({labels[key]}): drawn with {'; '.join(others)}")
    return out


def _partition(partition: dict) -> list[str]:
    """The lines of a statement's FILTER partition: its classes, the ε each spends at once
    (the statement's one share for all of them) and the L1 sensitivity they add."""
    classes = "; ".join(f"class {n}: " + ", ".join(f"{m['aggregate']} {m['part']}"
                                                     for m in members)
                        for n, members in enumerate(partition["classes"], 1))
    spent = "their ε in sequence" if partition["epsilon"] is None else \
        f"one share of ε {partition['epsilon']:.4g}, each class all of it at once"
    return [f"   FILTER partition (no row adds to two classes): {classes}",
            f"   (FILTER classes): {spent}; L1 sensitivity {partition['sensitivity']:g}, the "
            "most one class adds, as of a GROUP BY's cells"]
