"""Q2 at 10⁸ rows and more in bounded memory: dpsql against raw DuckDB, side by side.

Run: ``python benchmarks/scale.py [--rows 100000000] [--workdir /tmp/dpsql-scale]
[--memory-limit 4GB] [--sides raw,pass,window,dpsql,paired,paired_unlimited,one_group]``

The data is generated once, deterministically, by DuckDB streaming ``range(rows)`` into one
Parquet file (row groups of 10⁶ rows): ``uid = row // 10`` (10 rows per person), ``day`` one
of 7 from a hash of the row number, ``amount`` in [0, 100). Q2 is the peers' user-level
statement, ``SELECT day, COUNT(*), SUM(amount) FROM visits GROUP BY day`` with at most 3 days
and 2 rows per person-day. Each side runs in a process of its own, so that its peak RSS is
its own; a thread samples the size of its spill folder every 0.1 s. The sides:

- ``raw``: the statement on DuckDB, no bound;
- ``pass``: DuckDB's ``GROUP BY uid, day``, the per-person pass any per-query bound needs;
- ``window``: raw DuckDB enforcing the same bound with ROW_NUMBER windows;
- ``dpsql``: Q2 through ``dpsql.connect`` (the pivoted plan: 7 public days);
- ``paired``: the same with the paired plan (``compile/per_person.py``), which statements
  with private keys or more than 16 cells use;
- ``paired_unlimited``: the paired plan without a memory limit;
- ``one_group``: the statement with at most 1 day and 8 rows per person-day, the paired plan
  in its one-group-a-person form (a person's least pair by one MIN aggregate, no sort);
- ``snapshot``: Q2 on a connection with ``bounding="snapshot"``: the first query bounds every
  person's rows into a temporary table (``compile/bound.py``), then answers from it;
- ``distinct_raw`` / ``distinct``: ``SELECT day, COUNT(DISTINCT amount) ... GROUP BY day`` on
  raw DuckDB, and through dpsql (each person keeps at most 2 distinct amounts per day, chosen
  by keyed hash, in 3 days: ``per_person.distinct_values``).

All DuckDB sides but the last run under ``--memory-limit`` (default: dpsql's default).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import duckdb

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
DAYS_SQL = "[" + ", ".join(f"'{day}'" for day in DAYS) + "]"
Q2 = "SELECT day, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY day"
DISTINCT = "SELECT day, COUNT(DISTINCT amount) AS amounts FROM visits GROUP BY day"
RAW = {
    "raw": Q2,
    "pass": "SELECT COUNT(*), SUM(n), SUM(s) FROM (SELECT uid, day, COUNT(*) AS n, "
            "SUM(amount) AS s FROM visits GROUP BY uid, day)",
    # the bound by hand: 2 rows per person-day, then 3 days per person, by random rank
    "window": "WITH r AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY uid, day ORDER BY "
              "hash(uid, day, amount, 7)) AS rn FROM visits), c AS (SELECT uid, day, "
              "COUNT(*) AS n, SUM(amount) AS s FROM r WHERE rn <= 2 GROUP BY uid, day), "
              "g AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY uid ORDER BY hash(uid, day, 7)) "
              "AS gn FROM c) SELECT day, SUM(n), SUM(s) FROM g WHERE gn <= 3 GROUP BY day",
    "distinct_raw": DISTINCT,
}
SIDES = ("raw", "pass", "window", "dpsql", "paired", "paired_unlimited", "one_group", "snapshot",
         "distinct_raw", "distinct")


def generate(workdir: Path, rows: int) -> Path:
    """visits_<rows>.parquet in ``workdir`` (kept and reused)."""
    path = workdir / f"visits_{rows}.parquet"
    if not path.exists():
        partial = path.with_suffix(".partial")
        duckdb.connect().execute(
            f"COPY (SELECT i // 10 AS uid, {DAYS_SQL}[1 + CAST(hash(i, 1) % 7 AS INTEGER)] AS day, "
            f"CAST(hash(i, 2) % 10000 AS DOUBLE) / 100 AS amount FROM range({rows}) t(i)) "
            f"TO '{partial}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)")
        partial.rename(path)
    return path


def metadata(path: Path, groups: int = 3, rows: int = 2) -> dict:
    """The visits table as the peers' workload declares it (or with other L0 and L∞)."""
    return {"name": "scale", "budget": {"epsilon": 1e9},
            "tables": {"visits": {
                "source": str(path), "privacy_unit": "uid",
                "max_groups_per_unit": groups, "max_rows_per_group": rows,
                "columns": {"uid": {"type": "int"},
                            "day": {"type": "text", "values": DAYS},
                            "amount": {"type": "float", "lower": 0, "upper": 100}}}}}


def _spill_size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass  # removed while walking
    return total


def child(side: str, path: Path, memory_limit: str | None, spill: Path) -> dict:
    """Run one side in this process; its time, peak RSS and peak spill."""
    spill.mkdir(parents=True, exist_ok=True)
    peak = [0]

    def sample() -> None:
        while True:
            peak[0] = max(peak[0], _spill_size(spill))
            time.sleep(0.1)

    threading.Thread(target=sample, daemon=True).start()
    start = time.perf_counter()
    if side in RAW:
        con = duckdb.connect(config={"temp_directory": str(spill / "raw"),
                                     **({"memory_limit": memory_limit} if memory_limit else {})})
        con.execute(f"CREATE VIEW visits AS SELECT * FROM read_parquet('{path}')")
        rows = con.execute(RAW[side]).fetchall()
    else:
        import dpsql
        from dpsql.compile import per_person
        if side.startswith("paired"):
            per_person.MAX_PIVOT_CELLS = 0
        if side == "paired_unlimited":
            memory_limit = "1000GB"
        warnings.simplefilter("ignore")  # the insecure seed's warning
        # seeded: a secure connection would answer a repeated statement from the ledger
        bounds = (1, 8) if side == "one_group" else (3, 2)
        with dpsql.connect(metadata=metadata(path, *bounds), ledger=":memory:", insecure_seed=1,
                           memory_limit=memory_limit, temp_directory=str(spill),
                           bounding="snapshot" if side == "snapshot" else "per_query") as con:
            rows = con.execute(DISTINCT if side == "distinct" else Q2, epsilon=1).fetchall()
    seconds = time.perf_counter() - start
    return {"side": side, "seconds": seconds, "rows_out": len(rows),
            "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            "spill_gib": peak[0] / 2**30}


def run(side: str, path: Path, memory_limit: str | None, workdir: Path) -> dict:
    """One side in a fresh process (its result, or its error)."""
    args = [sys.executable, __file__, "--child", side, "--data", str(path),
            "--workdir", str(workdir)] + (["--memory-limit", memory_limit] if memory_limit
                                          else [])
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        # the exception's own line, not the interpreter's noise after it
        errors = re.findall(r"^(?:[\w.]+(?:Error|Exception)): (.*)$", done.stderr, re.MULTILINE)
        return {"side": side, "error": (errors or ["failed"])[-1][:160]}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000_000)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dpsql-scale"))
    parser.add_argument("--memory-limit", default=None,
                        help="DuckDB's memory_limit for every side (default: dpsql's)")
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        limit = args.memory_limit
        if limit is None:
            from dpsql.backends.duckdb import default_memory_limit
            limit = default_memory_limit()
        print(json.dumps(child(args.child, args.data, limit, args.workdir / "spill")))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    path = generate(args.workdir, args.rows)
    print(f"{args.rows:,} rows, {args.rows // 10:,} persons: {path} "
          f"({path.stat().st_size / 2**20:,.0f} MiB, ready in {time.perf_counter() - start:.1f} s)")
    results = {}
    for side in args.sides.split(","):
        results[side] = run(side, args.data or path, args.memory_limit, args.workdir)
        print(json.dumps(results[side]), file=sys.stderr, flush=True)
    floor = results.get("pass", {}).get("seconds")
    print(f"\nload average (1 min) before / after: {load:.2f} / {os.getloadavg()[0]:.2f}")
    print("| side | wall s | peak RSS GiB | peak spill GiB | ÷ per-person pass |\n"
          "|---|---:|---:|---:|---:|")
    for side, r in results.items():
        if "error" in r:
            print(f"| {side} | failed: {r['error']} | | | |")
            continue
        ratio = f"{r['seconds'] / floor:.2f}×" if floor else ""
        print(f"| {side} | {r['seconds']:.1f} | {r['rss_gib']:.2f} | {r['spill_gib']:.2f} "
              f"| {ratio} |")


if __name__ == "__main__":
    main()
