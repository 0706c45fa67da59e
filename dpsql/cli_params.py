"""click parameter types every ``dpsql`` command shares (the core ones and the plugins)."""

from __future__ import annotations

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
