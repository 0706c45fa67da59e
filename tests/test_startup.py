"""`import dpsql` and `dpsql --help` pay only for what they use, and exit skips the final GC
collections after closing what is open (benchmarks/startup.py times both)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

import dpsql

from conftest import catalogue

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
    assert dpsql.connect.__module__ == "dpsql.entry"  # imports only what it opens
    assert set(dpsql.__all__) <= set(dir(dpsql))
    assert dpsql.catalog.load_catalog  # submodules as attributes, as before


# Registered before dpsql's exit handler, so it runs after it (atexit: last in, first out).
EXIT_PROBE = """
import atexit, gc, os, sys
import dpsql
atexit.register(lambda: print(con._closed, gc.get_freeze_count() > 0,
                              os.path.exists(spill), flush=True))
con = dpsql.connect(metadata=sys.argv[1], ledger=sys.argv[2])
spill = con._backend._config["temp_directory"]
os.makedirs(spill)  # as DuckDB makes it when a query spills
print(con.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex", epsilon=0.5).fetchall())
"""


def _exit_probe(data_dir: Path, **env: str) -> subprocess.CompletedProcess:
    metadata = data_dir / "cases.yaml"
    metadata.write_text(yaml.safe_dump(catalogue(data_dir)))
    return subprocess.run([sys.executable, "-c", EXIT_PROBE, metadata, data_dir / "l.sqlite"],
                          capture_output=True, text=True, cwd=ROOT, check=True,
                          env={**os.environ, **env})


def test_exit_closes_open_connections_then_freezes_the_gc(data_dir):
    probe = _exit_probe(data_dir)
    assert probe.stdout.splitlines()[-1] == "True True False"  # closed, frozen, spill removed
    assert probe.stderr == ""  # no exception in the handler, no leak report from DuckDB


def test_exit_collection_can_be_kept(data_dir):
    probe = _exit_probe(data_dir, DPSQL_EXIT_COLLECT="1")
    assert probe.stdout.splitlines()[-1] == "True False False"
    assert probe.stderr == ""


def test_a_failing_close_at_exit_leaves_the_others_closed(monkeypatch):
    from dpsql import shutdown

    class Connection:
        closed = False

        def __init__(self, fails: bool) -> None:
            self.fails = fails

        def close(self) -> None:
            if self.fails:
                raise OSError("disk gone")
            self.closed = True

    connections = [Connection(fails=True), Connection(fails=False)]
    frozen = []
    monkeypatch.setattr(shutdown, "_open", connections)  # this order: the failing one first
    monkeypatch.setattr(shutdown.gc, "freeze", lambda: frozen.append(True))
    shutdown._at_exit()
    assert connections[1].closed and frozen == [True]


def test_a_forked_child_does_not_close_its_parents_connections(connect):
    from dpsql import shutdown

    con = connect()
    spill = con._backend._config["temp_directory"]
    os.makedirs(spill)
    pid = os.fork()
    if pid == 0:  # the child runs dpsql's exit handler, then leaves without pytest's
        try:
            shutdown._at_exit()
        finally:
            os._exit(0)
    # closing the parent's DuckDB there would crash the child (DuckDB is not fork-safe) and
    # remove the spill folder the parent uses
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    assert os.path.isdir(spill)
    assert con.execute("SELECT COUNT(*) FROM adult", epsilon=0.1).fetchall()
