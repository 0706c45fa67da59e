"""``dpsql evaluate attribute-selection``: DP chi-squared / information-gain attribute ranking."""

from __future__ import annotations

import json

import click

import dpsql
from evaluators.attribute_selection.contingency import DEFAULT_BINS
from evaluators.attribute_selection.selection import METHODS, select_attributes


@click.command("attribute-selection")
@click.option("--metadata", required=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML metadata of the data set (domains, bounds, neighbouring relation).")
@click.option("--table", required=True, help="The private table.")
@click.option("--class", "class_column", required=True, help="The class attribute.")
@click.option("--method", type=click.Choice(METHODS), default="chi2", show_default=True)
@click.option("--epsilon", type=float, required=True, help="ε for all attribute tables at once.")
@click.option("--top", "top", type=int, default=None, help="Keep the best N attributes.")
@click.option("--threshold", type=float, default=None,
              help="Keep attributes scoring above this (chi-squared, or gain in bits).")
@click.option("--attribute", "attributes", multiple=True,
              help="A candidate attribute (repeatable; default: all with a domain or bounds).")
@click.option("--bins", type=int, default=DEFAULT_BINS, show_default=True,
              help="Public equal-width bins per numeric attribute.")
@click.option("--db", default=None, help="DuckDB file (default: sources from the metadata).")
@click.option("--analyst", default=None, help="Ledger key (default: $USER).")
@click.option("--insecure-seed", type=int, default=None,
              help="Reproducible noise for experiments: NO privacy.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(metadata: str, table: str, class_column: str, method: str, epsilon: float,
            top: int | None, threshold: float | None, attributes: tuple[str, ...], bins: int,
            db: str | None, analyst: str | None, insecure_seed: int | None,
            as_json: bool) -> None:
    """Rank the attributes of TABLE by their DP relevance to the class (Var & İnan)."""
    options = {"metadata": metadata, "insecure_seed": insecure_seed}
    if analyst is not None:
        options["analyst"] = analyst
    connection = dpsql.connect(db, **options)
    try:
        selection = select_attributes(
            connection, table, class_column, method=method, epsilon=epsilon,
            n=top, threshold=threshold, attributes=attributes or None, bins=bins,
        )
    finally:
        connection.close()
    result = selection.to_json()
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(f"{method} ranking of {table} (ε = {result['epsilon_spent']:g}, "
               f"sensitivity {result['sensitivity']:g}, {result['neighbouring']}):")
    for position, name in enumerate(result["ranking"], start=1):
        mark = "*" if name in result["selected"] else " "
        click.echo(f" {mark} {position:>2}. {name:<24} {result['scores'][name]:.4f}")
    click.echo(f"selected: {', '.join(result['selected'])}")
