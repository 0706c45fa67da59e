"""``python -m dpsql.server serve --config server.yaml`` / ``passwd``."""

import click

from dpsql.server.cli import passwd, serve


@click.group()
def main() -> None:
    """The dpsql service."""


main.add_command(serve)
main.add_command(passwd)

if __name__ == "__main__":
    main()
