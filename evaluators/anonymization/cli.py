"""``dpsql anonymize``: k-anonymity / ℓ-diversity / t-closeness by full-domain generalization,
optionally with ρ-Gain passes and an ε-DP release of the chosen node's class counts."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

import dpsql
from dpsql.budget import positive
from evaluators import _catalog
from evaluators._budget import require_budget
from evaluators._cli import EXACT, evaluator_options, reuse_note
from evaluators.anonymization.anonymizer import (
    AnonymizationConfig,
    release_format,
    write_release,
)
from evaluators.anonymization.criteria import (
    L_VARIANTS,
    T_VARIANTS,
    PrivacyModel,
    achieved_privacy,
    recursive_l,
    sensitive_domain,
)
from evaluators.anonymization.dp_release import compare_releases, release_counts
from evaluators.anonymization.hierarchies import load_hierarchies, read_arx_hierarchy
from evaluators.anonymization.objectives import OBJECTIVES
from evaluators.anonymization.rho_gain import result_payload, rho_gain
from evaluators.anonymization.risk import risk_profile
from evaluators.anonymization.source import create_source, open_custodian


def default_qids(metadata: str, table: str, hierarchies: Path, sensitive: str | None) -> list[str]:
    """Columns of ``table`` (metadata order) with a hierarchy file, except the sensitive one."""
    spec = _catalog.table(metadata, table)
    present = {p.stem.split("hierarchy_")[-1] for p in hierarchies.glob("*.csv")}
    qids = [c for c in spec.columns if c in present and c != sensitive]
    if not qids:
        raise dpsql.ProgrammingError(
            f"no column of {table!r} has a hierarchy in {str(hierarchies)!r}",
            hint="name the files <column>.csv or pass --qid",
        )
    return qids


@click.command("anonymize")
@evaluator_options(table_help="The table to anonymize.",
                   epsilon_help="Also release pass 0's class counts with ε-DP and compare "
                   "(alias --dp-epsilon).",
                   output_help="Write the release (.csv or .parquet).", seed=False,
                   insecure_seed_help="Reproducible DP noise for experiments: NO privacy.")
@click.option("--hierarchies", "hierarchy_dir", default=None,
              type=click.Path(exists=True, file_okay=False),
              help="Folder of ARX-format hierarchy CSVs named <column>.csv.")
@click.option("--check", is_flag=True,
              help="Only report the k, ℓ, t and risks TABLE achieves as it is (e.g. a table "
                   "anonymized elsewhere); needs --qid.")
@click.option("--qid", "qids", multiple=True,
              help="A quasi-identifier (repeatable; default: every column with a hierarchy).")
@click.option("--sensitive", default=None, help="Sensitive attribute (for ℓ and t).")
@click.option("--k", "k", type=int, default=2, show_default=True, help="k of k-anonymity.")
@click.option("--l", "l_value", type=float, default=None, help="ℓ of ℓ-diversity.")
@click.option("--l-variant", type=click.Choice(L_VARIANTS), default="distinct",
              show_default=True)
@click.option("--c", "c_value", type=float, default=None, help="c of recursive (c, ℓ)-diversity.")
@click.option("--t", "t_value", type=float, default=None, help="t of t-closeness.")
@click.option("--t-variant", type=click.Choice(T_VARIANTS), default="equal", show_default=True,
              help="EMD: equal distance, ordered (sorted values) or hierarchical.")
@click.option("--objective", type=click.Choice(sorted(OBJECTIVES)), default="dm",
              show_default=True, help="What the lattice search minimizes.")
@click.option("--suppression-limit", type=float, default=1.0, show_default=True,
              help="Largest share of records that may be suppressed.")
@click.option("--rho", type=click.IntRange(min=0), default=0, show_default=True,
              help="ρ-Gain passes re-anonymizing the suppressed records.")
@click.option("--reference", type=click.Choice(["original", "input"]), default="original",
              show_default=True, help="t-closeness reference distribution in later passes.")
@click.option("--no-prune", is_flag=True, help="Exhaustive search (to verify the pruned one).")
@click.option("--dp-node", default=None,
              help="Generalization levels of the ε-DP counts, one per QID (e.g. 0,1,2), chosen "
                   "from public knowledge: then only these ε-DP counts are released, with no "
                   "exact search before them. Default: the node the search picked from the "
                   "exact data (the counts are ε-DP given it, the release as a whole is not).")
@click.option("--dp-epsilon", type=float, default=None, hidden=True,
              help="Former name of --epsilon.")
def command(metadata, table, epsilon, output, insecure_seed, as_json, analyst, ledger,
            hierarchy_dir, check, qids, sensitive, k, l_value, l_variant, c_value, t_value,
            t_variant, objective, suppression_limit, rho, reference, no_prune,
            dp_node, dp_epsilon) -> None:
    """Anonymize TABLE by full-domain generalization with suppression (ARX-style), optionally
    with ρ-Gain passes; print the chosen node, classes, outliers, C_AVG, DM, risks, and the
    k, ℓ and t the release achieves beside the targets."""
    dp_epsilon = epsilon if epsilon is not None else dp_epsilon
    _refuse_unused(check, dp_epsilon, output, dp_node)
    if check:
        payload = _check_table(metadata, table, list(qids), sensitive, hierarchy_dir, analyst,
                               ledger, l_value)
        click.echo(json.dumps(payload) if as_json else "\n".join(
            f"{key}: {value}" for key, value in payload.items()))
        return
    if hierarchy_dir is None:
        raise dpsql.ProgrammingError("anonymizing needs hierarchies", hint="pass --hierarchies DIR")
    directory = Path(hierarchy_dir)
    qids = list(qids) or default_qids(metadata, table, directory, sensitive)
    hierarchies = load_hierarchies(directory, qids)
    sensitive_file = directory / f"{sensitive}.csv" if sensitive else None
    config = AnonymizationConfig(
        qids=tuple(qids), hierarchies=hierarchies,
        model=PrivacyModel(k=k, l=l_value, l_variant=l_variant, c=c_value, t=t_value,
                           t_variant=t_variant),
        objective=objective, sensitive=sensitive,
        sensitive_hierarchy=read_arx_hierarchy(sensitive_file, sensitive)
        if sensitive_file is not None and sensitive_file.is_file() else None,
        suppression_limit=suppression_limit, prune=not no_prune,
    )
    public_node = _public_node(dp_node, qids, hierarchies) if dp_node is not None else None
    # refused before the custodian's read, which was logged for runs that then failed here
    if output is not None:
        release_format(output)
    if dp_epsilon is not None:
        _require_budget(metadata, dp_epsilon, analyst, ledger)
    if public_node is not None:
        _dp_only(metadata, table, config, public_node, dp_epsilon, insecure_seed, analyst,
                 ledger, as_json)
        return
    custodian = open_custodian(metadata, analyst=analyst, ledger=ledger)
    try:
        source = create_source(custodian, table, config.columns)
        result = rho_gain(custodian.duckdb, source, config, rho, reference=reference)
        payload = result_payload(result, config)
        if output is not None:
            columns = ", ".join(f'"{c}"' for c in config.columns)
            write_release(custodian.duckdb,
                          f"SELECT {columns} FROM {result.release_table} ORDER BY rid", output)
            payload["output"] = output
        if dp_epsilon is not None:
            payload["dp"] = _dp_alternative(metadata, table, config, result, dp_epsilon,
                                            insecure_seed, analyst, ledger, custodian,
                                            public_node)
            payload["epsilon_spent"] = payload["dp"]["epsilon_spent"]
    finally:
        custodian.close()
    if as_json:
        click.echo(json.dumps(payload))
        return
    _print_summary(payload)


def _refuse_unused(check: bool, epsilon: float | None, output: str | None,
                   dp_node: str | None) -> None:
    """Refuse options the run would ignore: --check releases nothing, --dp-node places the
    ε-DP counts, which only --epsilon releases, and makes no k-anonymous release to write
    (the first two ran, and said nothing of it)."""
    if check and (epsilon is not None or output is not None or dp_node is not None):
        raise dpsql.ProgrammingError(
            "--check measures TABLE as it is and releases nothing: --epsilon, --output and "
            "--dp-node do not apply", hint="leave them out, or leave out --check")
    if dp_node is not None and epsilon is None:
        raise dpsql.ProgrammingError(
            "--dp-node is the node of the ε-DP counts, which only --epsilon releases",
            hint="add --epsilon E, or leave out --dp-node")
    if dp_node is not None and output is not None:
        raise dpsql.ProgrammingError(
            "--output writes the k-anonymous release, which --dp-node does not make",
            hint="leave out --output (the noisy counts are printed), or --dp-node")


def _require_budget(metadata, epsilon: float, analyst, ledger) -> None:
    """Refuse an ε that is not a positive number or that the budget cannot cover, before
    anything is read."""
    with dpsql.connect(None, metadata=metadata, analyst=analyst, ledger=ledger) as dataset:
        require_budget(dataset, positive(epsilon))


def _check_table(metadata, table, qids, sensitive, hierarchy_dir, analyst, ledger, l_value):
    """Achieved k, ℓ, t, utility and risk of the table as it is."""
    if not qids:
        raise dpsql.ProgrammingError("--check needs the quasi-identifiers", hint="pass --qid")
    sensitive_hierarchy = None
    if sensitive and hierarchy_dir and (Path(hierarchy_dir) / f"{sensitive}.csv").is_file():
        sensitive_hierarchy = read_arx_hierarchy(Path(hierarchy_dir) / f"{sensitive}.csv")
    custodian = open_custodian(metadata, analyst=analyst, ledger=ledger)
    try:
        source = create_source(custodian, table, qids + ([sensitive] if sensitive else []))
        con = custodian.duckdb
        domain = (sensitive_domain(con, source, sensitive, sensitive_hierarchy)
                  if sensitive else None)
        achieved = achieved_privacy(con, source, qids, sensitive, domain, recursive_l(l_value))
        risk = risk_profile(con, source, qids)
    finally:
        custodian.close()
    return {"qids": qids, "sensitive": sensitive, **asdict(achieved),
            "max_prosecutor_risk": risk.max_prosecutor_risk,
            "avg_prosecutor_risk": risk.avg_prosecutor_risk,
            "sample_uniqueness": risk.sample_uniqueness, "epsilon_spent": 0.0}


def _public_node(text: str, qids: list[str], hierarchies) -> tuple[int, ...]:
    """The levels of ``--dp-node``, one per QID, each within its hierarchy."""
    try:
        node = tuple(int(level) for level in text.split(","))
    except ValueError:
        node = ()
    if len(node) != len(qids) or any(not 0 <= level < hierarchies[q].levels
                                      for q, level in zip(qids, node, strict=True)):
        raise dpsql.ProgrammingError(
            f"--dp-node {text!r} is not a level for each of the {len(qids)} QIDs "
            f"({', '.join(qids)})", hint="give one level per QID, from 0 (as is) to its "
            f"hierarchy's top: e.g. --dp-node {','.join('0' for _ in qids)}")
    return node


def _dp_only(metadata, table, config, node, epsilon, seed, analyst, ledger, as_json) -> None:
    """The ε-DP counts at a public ``--dp-node``, released on their own: the exact k-anonymity
    search (and its check that every value is in a hierarchy) does not run, so it cannot gate
    the release (a person whose sex was in no hierarchy made it a DataError on D′ only);
    values outside a hierarchy are counted under NULL."""
    custodian = open_custodian(metadata, analyst=analyst, ledger=ledger)
    try:
        dp = _dp_alternative(metadata, table, config, None, epsilon, seed, analyst, ledger,
                             custodian, node)
    finally:
        custodian.close()
    payload = {"qids": list(config.qids), "dp": dp, "epsilon_spent": dp["epsilon_spent"]}
    if as_json:
        click.echo(json.dumps(payload))
        return
    click.echo("\n".join(_dp_lines(dp)) + ":")
    for cell in dp["counts"]:
        click.echo("  " + ", ".join(f"{key} {value}" for key, value in cell.items()))
    click.echo(_compared(dp[EXACT]))


def _dp_alternative(metadata, table, config, result, epsilon, seed, analyst, ledger, custodian,
                    public_node=None):
    # the search picked its node from the exact data: counts at that node are ε-DP given
    # it, and the node (with its SQL) is released beside them; a public node makes the whole
    # release ε-DP
    node = public_node if public_node is not None else result.passes[0].node
    con = dpsql.connect(None, metadata=metadata, analyst=analyst, ledger=ledger,
                        insecure_seed=seed)
    try:
        released = release_counts(con, table, config.qids, config.hierarchies, node, epsilon)
    finally:
        con.close()
    exact = custodian.execute(released.sql).fetchdf()
    anonymous = exact.assign(n=exact["n"].where(exact["n"] >= config.model.k, 0))
    return {
        "node": list(node),
        "node_from": "public (--dp-node): the counts are ε-DP" if public_node is not None
        else "the k-anonymity search over the exact data: the counts are ε-DP given the "
        "node, the release as a whole is not (pass --dp-node for an ε-DP release)",
        "epsilon": epsilon,
        "epsilon_spent": released.epsilon_spent,
        "sql": released.sql,
        "counts": json.loads(released.counts.to_json(orient="records")),
        # scored against the true counts: for the custodian, not DP
        EXACT: {"dp_vs_exact": compare_releases(exact, released.counts, released.keys,
                                                config.model.k),
                "k_anonymous_vs_exact": compare_releases(exact, anonymous, released.keys,
                                                         config.model.k)},
    }


def _print_summary(payload: dict) -> None:
    click.echo(f"QIDs: {', '.join(payload['qids'])}")
    for p in payload["passes"]:
        click.echo(
            f"pass {p['pass']}: node {tuple(p['node'])} on {p['input_records']} records: "
            f"{p['classes']} classes, {p['outliers']} outliers, C_AVG {p['avg_class_size']:.2f}, "
            f"DM {p['dm']:.0f}, max prosecutor risk {p['max_prosecutor_risk']} "
            f"({p['evaluated_nodes']}/{p['lattice_size']} nodes in {p['search_seconds']:.2f} s)"
        )
    click.echo(
        f"release: {payload['published']} of {payload['records']} records in "
        f"{payload['classes']} classes, {payload['outliers']} removed, C_AVG "
        f"{payload['avg_class_size']:.2f}, DM {payload['dm']:.0f}, gain {payload['gain']:.2%}"
    )
    if payload["achieved"] is not None:
        click.echo(_achieved_line(payload["achieved"], payload["target"]))
    if "dp" in payload:
        dp = payload["dp"]
        click.echo("\n".join(_dp_lines(dp)))
        click.echo(_compared(dp[EXACT]))


def _achieved_line(achieved: dict, target: dict) -> str:
    """What the release achieves, each figure beside its target (if one was set)."""
    def beside(name: str, value, goal, digits: str = ".4g") -> str:
        shown = "none holds" if value is None else format(value, digits)
        return f"{name} {shown}" + ("" if goal is None else f" (target {goal:g})")

    parts = [beside("k", achieved["k"], target["k"], "d")]
    if achieved["l"] is not None:  # there is a sensitive attribute
        if achieved["l_variant"] == "recursive":
            parts.append(beside(f"recursive (c, {achieved['l']})-diversity for c above",
                                achieved["c"], target["c"]))
        else:
            parts.append(beside(f"{achieved['l_variant']} ℓ", achieved["l"], target["l"]))
    if achieved["t"] is not None:  # hierarchical EMD needs the sensitive hierarchy
        parts.append(beside(f"t ({achieved['t_variant']} EMD, largest of the classes)",
                            achieved["t"], target["t"]))
    return "achieved by the release: " + ", ".join(parts)


def _dp_lines(dp: dict) -> list[str]:
    """The DP release's header, a note if it was the stored answer of an earlier one, and
    its comparison with the truth."""
    lines = [(f"ε-DP counts (ε = {dp['epsilon_spent']:g}) at node {tuple(dp['node'])}, "
              f"from {dp['node_from']}")]
    note = reuse_note(dp["epsilon_spent"], dp["epsilon"])
    return lines + ([note] if note else [])


def _compared(comparisons: dict) -> str:
    """The DP release measured against the true counts, one line per comparison (these
    figures read the private data exactly: they are for the custodian, not to publish)."""
    lines = [f"compared with the true counts ({EXACT}):"]
    for name, figures in comparisons.items():
        shown = ", ".join(f"{key.replace('_', ' ')} {value:.4g}" for key, value in figures.items())
        lines.append(f"  {name.replace('_', ' ')}: {shown}")
    return "\n".join(lines)
