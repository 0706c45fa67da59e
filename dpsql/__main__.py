"""``python -m dpsql`` runs the command line interface."""

from dpsql.cli import main

main()
