"""DP query overhead: dpsql against the same raw DuckDB query, and against SmartNoise SQL.

Run: ``python benchmarks/engine_overhead.py [--sizes 100000 1000000 10000000] [--repeats 5]``

For each size it builds (once, in a DuckDB file under --workdir) a row-privacy table and
three user-level tables (10, 100 and 1,000 rows per user on average; L0 = 1, L∞ = 10), each
with a 10-value public key and a value in [0, 100], and a view of the last declared with an
L∞ that fits its 100 rows per (user, key), 100; then times ``SELECT grp, COUNT(*),
SUM(value), AVG(value) ... GROUP BY grp``: raw on DuckDB, and through dpsql (parse, analyse,
rewrite with clamping and, for the user-level tables, per-user contribution bounding, DuckDB,
noise, post-processing). Timings are medians of interleaved repeats, so both sides see the
same machine load; the script prints the table and the DP/raw ratios. For the user-level
tables it also times the raw per-(user, group) pass alone (``GROUP BY uid, grp``), the least
work a per-person bound computed in each query needs, and prints dpsql's time against it.

A second table times the same user-level queries on a connection with
``bounding="snapshot"``: the first query pays for bounding every person once (and is timed on
a fresh connection each repeat); later queries read the bounded snapshot.

SmartNoise SQL (``pip install smartnoise-sql`` into the interpreter given by
--smartnoise-python, e.g. a separate venv) runs the same query at 10^6 rows on its pandas
reader, in a subprocess, in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import duckdb

import dpsql

QUERY = ("SELECT grp, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean FROM {table} "
         "GROUP BY grp")
# every pair's aggregates are used, so DuckDB cannot prune them
PER_PERSON = ("SELECT COUNT(*), SUM(n), SUM(s) FROM (SELECT uid, grp, COUNT(*) AS n, "
              "SUM(value) AS s FROM {table} GROUP BY uid, grp)")
GROUPS = [f"g{i}" for i in range(10)]
ROWS_PER_USER = {"users": 10, "users100": 100, "users1000": 1000}
# the 1,000 rows/user table again (a view), declared with an L∞ that fits its 100 rows a pair
FITTING = {"users1000fit": ("users1000", 100)}
LABELS = {"rows": "row privacy", **{kind: f"user-level, {per:,} rows/user"
                                     for kind, per in ROWS_PER_USER.items()},
          **{kind: f"user-level, {ROWS_PER_USER[table]:,} rows/user, L∞ = {linf}"
             for kind, (table, linf) in FITTING.items()}}


def build(path: Path, sizes: list[int]) -> None:
    """Create rows_<n> and users_<n> tables in the DuckDB file (skipped when present)."""
    con = duckdb.connect(str(path))
    have = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables")
            .fetchall()}
    for n in sizes:
        for kind, users in (("rows", n), *((kind, max(n // per, 1))
                                           for kind, per in ROWS_PER_USER.items())):
            name = f"{kind}_{n}"
            if name in have:
                continue
            con.execute(f"""
                CREATE TABLE {name} AS
                SELECT CAST(hash(i) % {users} AS BIGINT) AS uid,
                       'g' || CAST(hash(i + 7) % 10 AS VARCHAR) AS grp,
                       (hash(i + 13) % 10000) / 100.0 AS value
                FROM range({n}) AS t(i)""")
        for kind, (table, _) in FITTING.items():
            con.execute(f"CREATE VIEW IF NOT EXISTS {kind}_{n} AS SELECT * FROM {table}_{n}")
    con.close()


def metadata(sizes: list[int]) -> dict:
    """Catalogue: rows_* with row privacy, users_* with uid as privacy unit (L0=1, L∞=10)."""
    columns = {"uid": {"type": "int"}, "grp": {"type": "text", "values": GROUPS},
               "value": {"type": "float", "lower": 0, "upper": 100}}
    tables = {}
    for n in sizes:
        tables[f"rows_{n}"] = {"privacy_unit": None, "columns": columns}
        for kind in ROWS_PER_USER:
            tables[f"{kind}_{n}"] = {"privacy_unit": "uid", "max_groups_per_unit": 1,
                                     "max_rows_per_group": 10, "columns": columns}
        for kind, (_, linf) in FITTING.items():
            tables[f"{kind}_{n}"] = {"privacy_unit": "uid", "max_groups_per_unit": 1,
                                     "max_rows_per_group": linf, "columns": columns}
    return {"name": "bench", "budget": {"epsilon": 1e9}, "tables": tables}


def _seconds(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _connect(path: Path, meta: dict, bounding: str = "per_query") -> dpsql.Connection:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpsql.connect(str(path), metadata=meta, ledger=":memory:", bounding=bounding)


def time_pair(path: Path, meta: dict, table: str, repeats: int) -> tuple[float, float, float]:
    """(raw seconds, dpsql seconds, raw per-person pass seconds or nan), interleaved medians."""
    raw = duckdb.connect(str(path), read_only=True)
    dp = _connect(path, meta)
    sql = QUERY.format(table=table)
    per_person = PER_PERSON.format(table=table) if not table.startswith("rows") else None
    raw.execute(sql).fetchall()  # warm the OS cache for both
    dp.execute(sql, epsilon=1.0).fetchall()
    raw_times, dp_times, pass_times = [], [], []
    for i in range(repeats):
        # a different ε each time: an identical release would be answered from the ledger
        epsilon = 1.0 + (i + 1) * 1e-6
        raw_times.append(_seconds(lambda: raw.execute(sql).fetchall()))
        dp_times.append(_seconds(lambda e=epsilon: dp.execute(sql, epsilon=e).fetchall()))
        if per_person:
            pass_times.append(_seconds(lambda: raw.execute(per_person).fetchall()))
    raw.close()
    dp.close()
    floor = statistics.median(pass_times) if pass_times else float("nan")
    return statistics.median(raw_times), statistics.median(dp_times), floor


def time_snapshot(path: Path, meta: dict, table: str, repeats: int
                  ) -> tuple[float, float, float]:
    """(raw seconds, dpsql first query, dpsql later queries) with bounded snapshots.

    The first query runs on a fresh connection each repeat, so it makes the snapshot every
    time; the later ones reuse the snapshot of one connection. Interleaved medians.
    """
    raw = duckdb.connect(str(path), read_only=True)
    dp = _connect(path, meta, "snapshot")
    sql = QUERY.format(table=table)
    raw.execute(sql).fetchall()
    dp.execute(sql, epsilon=1.0).fetchall()
    raw_times, first_times, later_times = [], [], []
    for i in range(repeats):
        epsilon = 1.0 + (i + 1) * 1e-6
        raw_times.append(_seconds(lambda: raw.execute(sql).fetchall()))
        fresh = _connect(path, meta, "snapshot")
        first_times.append(_seconds(
            lambda con=fresh, e=epsilon: con.execute(sql, epsilon=e).fetchall()))
        fresh.close()
        later_times.append(_seconds(lambda e=epsilon: dp.execute(sql, epsilon=e).fetchall()))
    raw.close()
    dp.close()
    return (statistics.median(raw_times), statistics.median(first_times),
            statistics.median(later_times))


SMARTNOISE = textwrap.dedent("""
    import sys, time, json, statistics
    import duckdb, snsql
    from snsql import Privacy
    path, table, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
    df = duckdb.connect(path, read_only=True).execute(f"SELECT * FROM {table}").df()
    meta = {"bench": {"bench": {table: {
        "max_ids": 10, "row_privacy": False, "censor_dims": False,
        "uid": {"type": "int", "private_id": True},
        "grp": {"type": "string"},
        "value": {"type": "float", "lower": 0, "upper": 100}}}}}
    reader = snsql.from_df(df, privacy=Privacy(epsilon=1.0, delta=1e-5), metadata=meta)
    sql = f"SELECT grp, COUNT(*) AS n, SUM(value) AS total, AVG(value) AS mean FROM bench.{table} GROUP BY grp"
    times = []
    for _ in range(repeats):
        start = time.perf_counter(); reader.execute(sql); times.append(time.perf_counter() - start)
    print(json.dumps({"seconds": statistics.median(times)}))
""")


def time_smartnoise(python: str, path: Path, table: str, repeats: int) -> float | None:
    """Median seconds of SmartNoise SQL on the same table, or None if it is not installed."""
    out = subprocess.run([python, "-c", SMARTNOISE, str(path), table, str(repeats)], check=False,
                         capture_output=True, text=True)
    if out.returncode != 0:
        print(f"SmartNoise SQL did not run ({out.stderr.strip().splitlines()[-1:]})",
              file=sys.stderr)
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    """Build the tables, time both sides, print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**5, 10**6, 10**7])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--smartnoise-python", default="/tmp/snenv/bin/python",
                        help="interpreter with smartnoise-sql installed (a separate venv)")
    args = parser.parse_args()
    path = args.workdir / "dpsql-bench.duckdb"
    build(path, args.sizes)
    meta = metadata(args.sizes)
    print("| rows | table | raw DuckDB (s) | dpsql (s) | dpsql / raw "
          "| raw per-person pass (s) | dpsql / pass |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    results = {}
    for n in args.sizes:
        for kind, label in LABELS.items():
            raw, dp, floor = time_pair(path, meta, f"{kind}_{n}", args.repeats)
            results[(n, kind)] = dp
            versus = "— | —" if math.isnan(floor) else f"{floor:.4f} | {dp / floor:.2f}"
            print(f"| {n:,} | {label} | {raw:.4f} | {dp:.4f} | {dp / raw:.2f} "
                  f"| {versus} |", flush=True)
    print("\nbounding=\"snapshot\": persons bounded once per table and GROUP BY\n")
    print("| rows | table | raw DuckDB (s) | first query (s) | first / raw "
          "| later queries (s) | later / raw |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        for kind in ROWS_PER_USER:
            raw, first, later = time_snapshot(path, meta, f"{kind}_{n}", args.repeats)
            print(f"| {n:,} | {LABELS[kind]} | {raw:.4f} | {first:.4f} | {first / raw:.2f} "
                  f"| {later:.4f} | {later / raw:.2f} |", flush=True)
    if 10**6 in args.sizes and Path(args.smartnoise_python).exists():
        print("\n| rows | table | SmartNoise SQL (s) | dpsql (s) | SmartNoise / dpsql |")
        print("|---:|---|---:|---:|---:|")
        for kind in ("rows", "users", "users100"):  # SmartNoise's pandas reader is slow
            sn = time_smartnoise(args.smartnoise_python, path, f"{kind}_{10**6}",
                                 max(args.repeats // 2, 1))
            if sn is not None:
                dp = results[(10**6, kind)]
                print(f"| 1,000,000 | {kind} | {sn:.3f} | {dp:.4f} | {sn / dp:.1f} |")


if __name__ == "__main__":
    main()
