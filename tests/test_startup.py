"""`import dpsql` and `dpsql --help` pay only for what they use (benchmarks/startup.py times it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dpsql

ROOT = Path(__file__).parents[1]
HEAVY = ("duckdb", "sqlglot", "pandas", "numpy", "yaml", "pyarrow", "evaluators")


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return set(out.stdout.split()) & set(HEAVY)


def test_import_dpsql_loads_no_query_stack():
    assert _loaded_after("import dpsql") == set()


def test_help_loads_no_query_stack_and_no_plugin():
    code = ("import contextlib, io\nfrom dpsql.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['evaluate', '--help'])")
    assert _loaded_after(code) == set()


def test_help_lists_plugins_with_their_own_short_help():
    out = subprocess.run([sys.executable, "-m", "dpsql", "evaluate", "--help"],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert "tree" in out and "Grow an ε-DP decision tree" in out
    assert "anonymize" in out and "Anonymize TABLE" in out


def test_every_public_name_still_imports():
    namespace: dict = {}
    exec(f"from dpsql import {', '.join(dpsql.__all__)}", namespace)  # noqa: S102
    assert all(namespace[name] is getattr(dpsql, name) for name in dpsql.__all__)
    assert dpsql.connect.__module__ == "dpsql.connection"
    assert set(dpsql.__all__) <= set(dir(dpsql))
    assert dpsql.catalog.load_catalog  # submodules as attributes, as before
