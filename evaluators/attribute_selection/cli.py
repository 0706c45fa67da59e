"""``dpsql evaluate attribute-selection``: DP chi-squared / information-gain attribute ranking."""

from __future__ import annotations

import click

import dpsql
from evaluators._cli import dataset_ledger, emit, evaluator_options, reuse_note
from evaluators.attribute_selection.selection import METHODS, SELECTION_BINS, select_attributes


@click.command("attribute-selection")
@evaluator_options(epsilon_required=True, epsilon_help="ε for all attribute tables at once.",
                   seed=False)
@click.option("--class", "class_column", required=True, help="The class attribute.")
@click.option("--method", type=click.Choice(METHODS), default="chi2", show_default=True)
@click.option("--top", "top", type=click.IntRange(min=0), default=None,
              help="Keep the best N attributes.")
@click.option("--threshold", type=float, default=None,
              help="Keep attributes scoring above this (chi-squared, or gain in bits).")
@click.option("--attribute", "attributes", multiple=True,
              help="A candidate attribute (repeatable; default: all with a domain or bounds).")
@click.option("--bins", type=click.IntRange(min=1), default=SELECTION_BINS, show_default=True,
              help="Public equal-width bins per numeric attribute (the report's 10).")
@click.option("--db", default=None, help="DuckDB file (default: sources from the metadata).")
def command(metadata: str, table: str, epsilon: float, output: str | None,
            insecure_seed: int | None, as_json: bool, analyst: str | None, ledger: str | None,
            class_column: str, method: str, top: int | None, threshold: float | None,
            attributes: tuple[str, ...], bins: int, db: str | None) -> None:
    """Rank the attributes of TABLE by their DP relevance to the class (Var & İnan)."""
    # the ledger `dpsql run --db DB` and `dpsql budget --db DB` charge and show (beside a
    # DuckDB file, else beside the metadata): one budget, whichever command spends it
    connection = dpsql.connect(db, metadata=metadata, analyst=analyst,
                               ledger=ledger if db else dataset_ledger(metadata, ledger),
                               insecure_seed=insecure_seed)
    try:
        selection = select_attributes(
            connection, table, class_column, method=method, epsilon=epsilon,
            n=top, threshold=threshold, attributes=attributes or None, bins=bins,
        )
    finally:
        connection.close()
    def text(result: dict) -> None:
        click.echo(f"{method} ranking of {table} (ε = {result['epsilon_spent']:g}, "
                   f"sensitivity {result['sensitivity']:g}, {result['neighbouring']}):")
        for position, name in enumerate(result["ranking"], start=1):
            mark = "*" if name in result["selected"] else " "
            click.echo(f" {mark} {position:>2}. {name:<24} {result['scores'][name]:.4f}")
        click.echo(f"selected: {', '.join(result['selected'])}")
        note = reuse_note(result["epsilon_spent"], epsilon)
        if note:
            click.echo(note)

    emit(selection.to_json(), as_json=as_json, output=output, text=text)
