"""click parameter types and options every ``dpsql`` command shares (the core ones and the
plugins)."""

from __future__ import annotations

import functools
from pathlib import Path

import click

from dpsql.errors import CatalogError, Error, InterfaceError


class ExistingFile(click.Path):
    """A file option or argument that must exist, refused as a dpsql error (exit code 1, JSON
    with ``--json``) like any other, not by click's usage error (exit code 2, no JSON)."""

    def __init__(self, what: str, hint: str, error: type[Error] = InterfaceError) -> None:
        super().__init__(dir_okay=False)
        self.what, self.hint, self.error = what, hint, error

    def convert(self, value, param, ctx):
        path = super().convert(value, param, ctx)
        if not Path(path).is_file():
            raise self.error(f"{self.what} {str(path)!r} does not exist", hint=self.hint)
        return path


#: ``--metadata`` of every command, refused with the words of ``load_catalog``
METADATA_FILE = ExistingFile("metadata file", "pass --metadata with the path of a YAML catalogue",
                             CatalogError)


def connection_options(func):
    """``--metadata``, ``--db``, ``--analyst`` and ``--ledger``, or ``--server-config`` and
    ``--dataset`` in place of the first three: the served dataset's, so that what the command
    charges lands in the ledger the server enforces (beside the metadata it went to a ledger
    of its own, which the server never reads). ``func`` gets metadata, db, analyst, ledger."""
    @functools.wraps(func)
    def resolved(*, server_config: str | None, dataset: str | None, **options):
        if server_config is not None:
            options.update(_served(server_config, dataset, options))
        elif options["metadata"] is None:
            raise click.UsageError("Missing option '--metadata' / '-m' (or --server-config).")
        return func(**options)

    options = [
        click.option("--metadata", "-m", default=None, type=METADATA_FILE,
                     help="YAML catalogue of tables, privacy units, bounds and budget."),
        click.option("--db", default=None, help="DuckDB database file (default: in-memory, "
                     "tables from the metadata's sources), postgresql://... or a Spark master "
                     "URL (spark://..., local[*])."),
        click.option("--analyst", default=None, help="Who is asking (default: OS user)."),
        click.option("--ledger", default=None, help="Budget ledger file (default: beside the "
                     "database, else beside the metadata), or postgresql://... for a ledger "
                     "shared by several machines."),
        click.option("--server-config", default=None, type=click.Path(dir_okay=False),
                     help="A `dpsql serve` configuration: its dataset's metadata, database "
                     "and ledger, in place of the three options above (the server's totals "
                     "then count what this command spends)."),
        click.option("--dataset", default=None,
                     help="The dataset of --server-config (default: its only one)."),
    ]
    for option in reversed(options):
        resolved = option(resolved)
    return resolved


def _served(path: str, dataset: str | None, options: dict) -> dict:
    """--metadata, --db and --ledger of the dataset a server configuration serves."""
    from dpsql.server.config import served_dataset

    given = [f"--{name}" for name in ("metadata", "db", "ledger") if options[name] is not None]
    if given:
        raise click.UsageError(f"--server-config names the dataset's metadata, database and "
                               f"ledger: leave out {', '.join(given)}.")
    served = served_dataset(path, dataset)
    return {"metadata": str(served.metadata), "ledger": served.ledger,
            "db": None if served.database is None else str(served.database)}
