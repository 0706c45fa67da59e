"""Whole-process cost: start-up of ``import dpsql`` / ``dpsql --help`` and a one-query run.

Run: ``python benchmarks/startup.py [--rows 1000000] [--repeats 7] [--workdir DIR]``

Every measurement is a fresh ``python`` process (what a user at a shell pays), timed wall-clock
around ``subprocess.run``; the rows of a repeat are interleaved, so all of them see the same
machine load, and the table gives medians. The load average (``os.getloadavg()``) is printed
before and after. Rows:

* ``python -c "pass"``: the interpreter alone;
* ``import duckdb`` and ``import dpsql``: the target is dpsql ≤ 1.5× DuckDB;
* ``dpsql --help``: the command line without any query stack or plugin;
* Q1 raw: ``SELECT grp, COUNT(*), SUM(value), AVG(value) FROM rows GROUP BY grp`` on a DuckDB
  file of --rows rows, in a ``python -c`` script that imports duckdb, opens the file, runs the
  query and prints the rows (the DuckDB CLI's work, from Python);
* Q1 dpsql (python -c): the same query through dpsql's Python API in a ``python -c`` script
  (``dpsql.connect``, row privacy, ε = 1, a throw-away ledger), which parses, bounds, runs it
  on DuckDB, adds noise and prints the rows: the like-for-like twin of the raw row, and the
  target of ≤ 2× the raw process;
* Q1 dpsql run: the same through the command line (click, and a table with intervals).

The repository's checkout is imported (the script runs from the repository root), with its
bytecode compiled as ``pip install`` would (one untimed warm-up round writes ``__pycache__``
even where ``PYTHONDONTWRITEBYTECODE`` is set).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUERY = ("SELECT grp, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean FROM rows "
         "GROUP BY grp")


def build(workdir: Path, rows: int) -> tuple[Path, Path, Path]:
    """The DuckDB file, its dpsql metadata and the query script (made once per size)."""
    import duckdb

    database = workdir / f"startup_{rows}.duckdb"
    if not database.exists():
        con = duckdb.connect(str(database))
        con.execute(f"""CREATE TABLE rows AS SELECT 'g' || (i % 10) AS grp,
                        (hash(i) % 10001) / 100.0 AS value FROM range({rows}) t(i)""")
        con.close()
    metadata = workdir / "startup.yaml"
    metadata.write_text(
        "name: startup\nbudget: {epsilon: 1000000000}\ntables:\n  rows:\n"
        "    privacy_unit: null\n    columns:\n"
        f"      grp: {{type: text, values: [{', '.join(f'g{i}' for i in range(10))}]}}\n"
        "      value: {type: float, lower: 0, upper: 100}\n")
    script = workdir / "q1.sql"
    script.write_text(QUERY + ";\n")
    return database, metadata, script


def commands(database: Path, metadata: Path, script: Path) -> dict[str, list[str]]:
    python = sys.executable
    raw = (f"import duckdb; con = duckdb.connect({str(database)!r}, read_only=True); "
           f"print(con.execute({QUERY!r}).fetchall())")
    api = (f"import dpsql; con = dpsql.connect({str(database)!r}, metadata={str(metadata)!r}, "
           f"ledger=':memory:'); print(con.execute({QUERY!r}, epsilon=1).fetchall())")
    return {
        'python -c "pass"': [python, "-c", "pass"],
        'python -c "import duckdb"': [python, "-c", "import duckdb"],
        'python -c "import dpsql"': [python, "-c", "import dpsql"],
        "dpsql --help": [python, "-m", "dpsql", "--help"],
        "Q1 raw DuckDB (python -c)": [python, "-c", raw],
        "Q1 dpsql (python -c)": [python, "-c", api],
        "Q1 dpsql run": [python, "-m", "dpsql", "run", str(script), "--metadata", str(metadata),
                         "--db", str(database), "--epsilon", "1", "--ledger", ":memory:"],
    }


def measure(commands: dict[str, list[str]], repeats: int) -> dict[str, float]:
    # Bytecode as after `pip install` (which compiles it): PYTHONDONTWRITEBYTECODE is dropped
    # and one untimed round writes the checkout's __pycache__ before the timed ones.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(repeats + 1):
        for name, command in commands.items():
            started = time.perf_counter()
            subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
            if round_:
                times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="Keep the DuckDB file here (default: a temporary folder).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dpsql-startup-") as temporary:
        workdir = args.workdir or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        cmds = commands(*build(workdir, args.rows))
        load_before = os.getloadavg()
        medians = measure(cmds, args.repeats)
        load_after = os.getloadavg()
    duckdb_import = medians['python -c "import duckdb"']
    raw_q1 = medians["Q1 raw DuckDB (python -c)"]
    reference = {'python -c "import dpsql"': (duckdb_import, "import duckdb", 1.5),
                 "dpsql --help": (duckdb_import, "import duckdb", None),
                 "Q1 dpsql (python -c)": (raw_q1, "Q1 raw", 2.0),
                 "Q1 dpsql run": (raw_q1, "Q1 raw", None)}
    print(f"whole processes, medians of {args.repeats} interleaved runs, {args.rows:,} rows; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after "
          f"(1-minute; {os.cpu_count()} CPUs)\n")
    print("| process | wall (s) | ratio | target |")
    print("|---|---:|---:|---:|")
    for name, seconds in medians.items():
        base, label, target = reference.get(name, (None, "", None))
        ratio = f"{seconds / base:.2f}× {label}" if base else ""
        goal = f"≤ {target}×" if target else ""
        print(f"| {name} | {seconds:.3f} | {ratio} | {goal} |")


if __name__ == "__main__":
    main()
