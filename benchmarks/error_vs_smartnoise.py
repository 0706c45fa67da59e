"""Error at equal ε: dpsql against SmartNoise SQL on the same queries and data.

Run: ``python benchmarks/error_vs_smartnoise.py [--repeats 100] [--epsilon 1.0] [--quick]``

Data: the real UCI Adult table (row privacy; needs ``$DPSQL_DATASETS/adult.csv``) and a
generated ``visits`` table with a privacy unit (3,000 users with 1-5 rows each, a per-user
``region`` and a per-row ``visit_day``), written once to a DuckDB file (dpsql) and a SQLite file
(SmartNoise SQL, in its own interpreter given by --smartnoise-python, e.g. a venv with
``pip install smartnoise-sql==1.0.10``; it is not a dpsql dependency). The exact answers come
from ``dpsql.connect_custodian`` on the same DuckDB file, without any contribution bounding,
so the error of both engines includes their bias as well as their noise.

Fairness: the same ε per query (SmartNoise's ``Privacy(epsilon)`` is per noisy column, so it
gets ε divided by the number of columns its odometer charges, e.g. 2 for AVG), the same
clamping bounds, and equivalent contribution bounds: every user has at most 5 rows, so
SmartNoise's ``max_ids: 5`` drops nothing, nor does dpsql's L∞ = 5 with L0 = 1 for keys that
are user attributes (one group per user). For keys a user spreads rows over (``visit_day``), dpsql
bounds L0 groups × L∞ rows: it is run with L0 = L∞ = 5 (no row dropped, Δ = 25) and with
L0 = 5, L∞ = 1 (Δ = 5, SmartNoise's sensitivity, some rows dropped). SmartNoise keys are
released without thresholding (``censor_dims: false``) for the public-key queries, which is
what dpsql does for keys with declared values; the private-key query uses thresholding on both
sides (δ = 1e-6). Each repetition opens a fresh dpsql connection with a throw-away ledger, so
repeated statements are fresh releases (no answer reuse).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
from tqdm import tqdm

import dpsql
from dpsql.catalog import datasets_dir

ADULT_YAML = Path(__file__).resolve().parents[1] / "data" / "datasets" / "adult.yaml"
EDUCATION = ["10th", "11th", "12th", "1st-4th", "5th-6th", "7th-8th", "9th", "Assoc-acdm",
             "Assoc-voc", "Bachelors", "Doctorate", "HS-grad", "Masters", "Preschool",
             "Prof-school", "Some-college"]
REGIONS = ["North", "East", "South", "West", "Centre"]
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
MAX_IDS = 5
DELTA = 1e-6


@dataclass(frozen=True)
class Query:
    """One benchmark query: dpsql SQL; SmartNoise runs it on ``sn_table`` in schema ``b``."""

    label: str
    sql: str  # over dpsql's table names
    dp_table: str
    sn_table: str
    private_keys: bool = False

    def smartnoise_sql(self) -> str:
        return self.sql.replace(f" FROM {self.dp_table}", f" FROM b.{self.sn_table}")

    def exact_sql(self) -> str:
        return self.sql.replace(f" FROM {self.dp_table}", f" FROM {self.sn_table}")


QUERIES = [
    Query("COUNT(*)", "SELECT COUNT(*) AS n FROM adult", "adult", "adult"),
    Query("SUM(age)", "SELECT SUM(age) AS s FROM adult", "adult", "adult"),
    Query("AVG(age)", "SELECT AVG(age) AS a FROM adult", "adult", "adult"),
    Query("AVG(hours)", "SELECT AVG(hours) AS a FROM adult", "adult", "adult"),
    Query("sex, COUNT(*)", "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", "adult", "adult"),
    Query("education, COUNT(*)", "SELECT education, COUNT(*) AS n FROM adult GROUP BY education",
          "adult", "adult"),
    Query("sex, SUM(hours)", "SELECT sex, SUM(hours) AS s FROM adult GROUP BY sex", "adult",
          "adult"),
    Query("salary, AVG(age)", "SELECT salary, AVG(age) AS a FROM adult GROUP BY salary", "adult",
          "adult"),
    Query("education, COUNT(*) [private keys]",
          "SELECT education, COUNT(*) AS n FROM adult_keys GROUP BY education", "adult_keys",
          "adult_keys", private_keys=True),
    Query("COUNT(*)", "SELECT COUNT(*) AS n FROM visits", "visits", "visits"),
    Query("SUM(amount)", "SELECT SUM(amount) AS s FROM visits", "visits", "visits"),
    Query("AVG(amount)", "SELECT AVG(amount) AS a FROM visits", "visits", "visits"),
    Query("COUNT(DISTINCT uid)", "SELECT COUNT(DISTINCT uid) AS n FROM visits", "visits",
          "visits"),
    Query("region, COUNT(*)", "SELECT region, COUNT(*) AS n FROM visits GROUP BY region",
          "visits", "visits"),
    Query("region, AVG(amount)", "SELECT region, AVG(amount) AS a FROM visits GROUP BY region",
          "visits", "visits"),
    Query("visit_day, COUNT(*) [dpsql L0=5, L∞=5]",
          "SELECT visit_day, COUNT(*) AS n FROM visits_spread GROUP BY visit_day",
          "visits_spread", "visits"),
    Query("visit_day, COUNT(*) [dpsql L0=L∞=5, ≤5 rows in all]",
          "SELECT visit_day, COUNT(*) AS n FROM visits_total GROUP BY visit_day",
          "visits_total", "visits"),
    Query("visit_day, COUNT(*) [dpsql L0=5, L∞=1]",
          "SELECT visit_day, COUNT(*) AS n FROM visits_l1 GROUP BY visit_day", "visits_l1",
          "visits"),
    Query("region, COUNT(*) [private keys]",
          "SELECT region, COUNT(*) AS n FROM visits_keys GROUP BY region", "visits_keys",
          "visits_keys", private_keys=True),
]


def generate_visits(seed: int = 5) -> pd.DataFrame:
    """3,000 users with 1..MAX_IDS rows each; region is per user, visit_day and amount per row."""
    rng = np.random.default_rng(seed)
    users = 3000
    counts = rng.integers(1, MAX_IDS + 1, users)
    uid = np.repeat(np.arange(users), counts)
    region = np.repeat(rng.choice(REGIONS, users, p=[0.4, 0.25, 0.2, 0.1, 0.05]), counts)
    return pd.DataFrame({"uid": uid, "region": region, "visit_day": rng.choice(DAYS, uid.size),
                         "amount": np.round(rng.uniform(0, 100, uid.size), 2)})


def read_adult() -> pd.DataFrame:
    """The columns of real Adult this benchmark uses, read by the custodian."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        custodian = dpsql.connect_custodian(None, metadata=str(ADULT_YAML), ledger=":memory:")
    frame = custodian.execute('SELECT age, "hours-per-week" AS hours, sex, education, '
                              '"salary-class" AS salary FROM adult').fetchdf()
    custodian.close()
    return frame


def build(workdir: Path) -> tuple[Path, Path]:
    """Write the same tables (and per-configuration views) to DuckDB and to SQLite."""
    frames = {"adult": read_adult(), "visits": generate_visits()}
    views = {"adult_keys": "adult", "visits_spread": "visits", "visits_l1": "visits",
             "visits_total": "visits",
             "visits_keys": "visits"}
    duck_path, lite_path = workdir / "error-bench.duckdb", workdir / "error-bench.sqlite"
    for path in (duck_path, lite_path):
        path.unlink(missing_ok=True)
    with duckdb.connect(str(duck_path)) as duck, sqlite3.connect(lite_path) as lite:
        for name, frame in frames.items():
            duck.register("frame", frame)
            duck.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            duck.unregister("frame")
            frame.to_sql(name, lite, index=False)
        for view, table in views.items():
            duck.execute(f"CREATE VIEW {view} AS SELECT * FROM {table}")
            lite.execute(f"CREATE VIEW {view} AS SELECT * FROM {table}")
    return duck_path, lite_path


def dpsql_metadata() -> dict:
    """Catalogue: same bounds as SmartNoise's; visits bounded per configuration."""
    adult = {"age": {"type": "int", "lower": 17, "upper": 90},
             "hours": {"type": "int", "lower": 1, "upper": 99},
             "sex": {"type": "text", "values": ["Female", "Male"]},
             "education": {"type": "text", "values": EDUCATION},
             "salary": {"type": "text", "values": ["<=50K", ">50K"]}}
    visits = {"uid": {"type": "int"}, "region": {"type": "text", "values": REGIONS},
              "visit_day": {"type": "text", "values": DAYS},
              "amount": {"type": "float", "lower": 0, "upper": 100}}

    def without_values(columns: dict, name: str) -> dict:
        return {**columns, name: {"type": "text"}}

    def user_table(columns: dict, l0: int, linf: int) -> dict:
        return {"privacy_unit": "uid", "max_groups_per_unit": l0, "max_rows_per_group": linf,
                "columns": columns}

    return {"name": "error-bench", "budget": {"epsilon": 1e12, "delta": 0.5}, "tables": {
        "adult": {"privacy_unit": None, "columns": adult},
        "adult_keys": {"privacy_unit": None, "columns": without_values(adult, "education")},
        "visits": user_table(visits, 1, MAX_IDS),
        "visits_spread": user_table(visits, MAX_IDS, MAX_IDS),
        "visits_l1": user_table(visits, MAX_IDS, 1),
        # SmartNoise's max_ids bounds a user's rows in all: dpsql's max_rows_per_unit
        "visits_total": {**user_table(visits, MAX_IDS, MAX_IDS), "max_rows_per_unit": MAX_IDS},
        "visits_keys": user_table(without_values(visits, "region"), 1, MAX_IDS),
    }}


def smartnoise_metadata() -> dict:
    """SmartNoise SQL metadata of the same tables (max_ids = every user's row limit)."""
    adult = {"row_privacy": True, "censor_dims": False,
             "age": {"type": "int", "lower": 17, "upper": 90},
             "hours": {"type": "int", "lower": 1, "upper": 99},
             "sex": {"type": "string"}, "education": {"type": "string"},
             "salary": {"type": "string"}}
    visits = {"max_ids": MAX_IDS, "row_privacy": False, "censor_dims": False,
              "uid": {"type": "int", "private_id": True}, "region": {"type": "string"},
              "visit_day": {"type": "string"},
              "amount": {"type": "float", "lower": 0, "upper": 100}}
    return {"bench": {"b": {"adult": adult, "adult_keys": {**adult, "censor_dims": True},
                            "visits": visits, "visits_keys": {**visits, "censor_dims": True}}}}


def exact_answers(duck_path: Path) -> dict[str, dict]:
    """Unbounded exact answers, keyed by the query's keys, from a custodian connection."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        custodian = dpsql.connect_custodian(str(duck_path), metadata=dpsql_metadata(),
                                            ledger=":memory:")
    answers = {q.sql: to_cells(custodian.execute(q.exact_sql()).fetchall()) for q in QUERIES}
    custodian.close()
    return answers


def to_cells(rows) -> dict:
    """{keys tuple: value} for rows whose last column is the one aggregate."""
    return {tuple(row[:-1]): float(row[-1]) for row in rows}


def run_dpsql(duck_path: Path, epsilon: float, repeats: int) -> tuple[dict, dict]:
    """(answers per query per repetition, sensitivity per query); a refused query maps to
    the refusal message instead."""
    meta = dpsql_metadata()
    answers: dict[str, list | str] = {q.sql: [] for q in QUERIES}
    sensitivity: dict[str, float | None] = {}
    for _ in tqdm(range(repeats), desc="dpsql", unit="rep"):
        with dpsql.connect(str(duck_path), metadata=meta, ledger=":memory:") as con:
            for query in QUERIES:
                if isinstance(answers[query.sql], str):
                    continue
                try:
                    privacy = {"epsilon": epsilon, **({"delta": DELTA} if query.private_keys
                                                      else {})}
                    cursor = con.execute(query.sql, **privacy)
                except dpsql.Error as err:
                    answers[query.sql] = f"refused: {str(err).splitlines()[0]}"
                    continue
                except TypeError:  # execute() without a delta= parameter: not landed yet
                    answers[query.sql] = "not landed (execute() takes no δ yet)"
                    continue
                answers[query.sql].append(to_cells(cursor.fetchall()))
                sensitivity[query.sql] = float(cursor.sensitivity)
    return answers, sensitivity


SMARTNOISE = textwrap.dedent("""
    import json, sqlite3, sys, time
    import snsql
    from snsql import Privacy
    job = json.load(sys.stdin)
    con = sqlite3.connect(":memory:")
    con.execute("ATTACH ? AS b", (job["sqlite"],))
    out = {}
    for query, table in job["queries"]:
        # one table per reader: with several, SmartNoise 1.0.10 plans every query with one
        # table's row_privacy/censor_dims, so costs and thresholds would be wrong
        metadata = {"bench": {"b": {table: job["metadata"]["bench"]["b"][table]}}}
        probe = snsql.from_connection(con, privacy=Privacy(epsilon=1.0, delta=job["delta"]),
                                      metadata=metadata, engine="sqlite")
        columns = probe.get_privacy_cost(query)[0]  # noisy columns its odometer charges
        # per statement: ε divided over those columns; nominal: Privacy(ε) as SmartNoise reads it
        share = job["epsilon"] if job.get("nominal") else job["epsilon"] / columns
        reader = snsql.from_connection(
            con, privacy=Privacy(epsilon=share, delta=job["delta"]),
            metadata=metadata, engine="sqlite")
        subquery, _ = reader._rewrite(query)
        mechanisms = [{"sensitivity": float(m.sensitivity) * m.max_contrib,
                       "scale": float(m.scale)} for m in reader._get_mechanisms(subquery) if m]
        start, rows = time.perf_counter(), []
        for _ in range(job["repeats"]):
            rows.append([list(r) for r in reader.execute(query)[1:]])
        out[query] = {"rows": rows, "columns": columns, "mechanisms": mechanisms,
                      "seconds": (time.perf_counter() - start) / job["repeats"]}
        print(query[:60], file=sys.stderr, flush=True)
    print(json.dumps(out, default=float))
""")


def smartnoise_releases(python: str, job: dict, label: str = "SmartNoise SQL") -> dict:
    """Run the SMARTNOISE script on ``job`` (sqlite, epsilon, delta, repeats, metadata, queries
    as [sql, table] pairs, optional nominal) in ``python``; its raw answer per query: rows per
    repetition, columns charged, mechanisms, seconds."""
    process = subprocess.Popen([python, "-c", SMARTNOISE], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    process.stdin.write(json.dumps(job))
    process.stdin.close()
    for _ in tqdm(job["queries"], desc=label, unit="query"):
        line = process.stderr.readline()
        if not line:
            break
    stdout, stderr = process.stdout.read(), process.stderr.read()
    if process.wait() != 0:
        raise RuntimeError(f"SmartNoise SQL failed:\n{stderr}")
    return json.loads(stdout)


def run_smartnoise(python: str, lite_path: Path, epsilon: float, repeats: int) -> dict:
    """SmartNoise SQL answers per query per repetition, with its mechanisms' settings."""
    job = {"sqlite": str(lite_path), "epsilon": epsilon, "delta": DELTA, "repeats": repeats,
           "metadata": smartnoise_metadata(),
           "queries": [(q.smartnoise_sql(), q.sn_table) for q in QUERIES]}
    try:
        raw = smartnoise_releases(python, job)
    except RuntimeError as err:
        sys.exit(str(err))
    return {q.sql: {**raw[q.smartnoise_sql()],
                    "rows": [to_cells(rows) for rows in raw[q.smartnoise_sql()]["rows"]]}
            for q in QUERIES}


def mean_absolute_error(runs: list[dict], exact: dict) -> float:
    """MAE over every cell of the exact answer and repetition; a missing key counts as 0."""
    errors = [abs(run.get(key, 0.0) - value) for run in runs for key, value in exact.items()]
    return float(np.mean(errors))


def released_keys(runs: list[dict], exact: dict) -> float:
    """Mean share of the exact keys that a run released (for thresholded private keys)."""
    return float(np.mean([len(set(run) & set(exact)) / len(exact) for run in runs]))


def table(exact: dict, dp: dict, dp_sensitivity: dict, sn: dict) -> list[str]:
    """Markdown rows: query, dpsql MAE, SmartNoise MAE, ratio, sensitivities."""
    lines = [("| table | query | dpsql MAE | SmartNoise MAE | SmartNoise / dpsql | dpsql Δ "
              "(whole query) | SmartNoise Δ per column (noise scale) |"),
             "|---|---|---:|---:|---:|---:|---|"]
    for query in QUERIES:
        truth = exact[query.sql]
        sn_mae = mean_absolute_error(sn[query.sql]["rows"], truth)
        sn_delta = ", ".join(f"{m['sensitivity']:g} ({m['scale']:.4g})"
                             for m in sn[query.sql]["mechanisms"])
        if query.private_keys:
            sn_delta += f"; keys released {released_keys(sn[query.sql]['rows'], truth):.0%}"
        table_name = "adult (row privacy)" if query.dp_table.startswith("adult") \
            else "visits (uid, ≤5 rows)"
        if isinstance(dp[query.sql], str):
            lines.append(f"| {table_name} | {query.label} | {dp[query.sql]} | {sn_mae:.4g} | – "
                         f"| – | {sn_delta} |")
            continue
        dp_mae = mean_absolute_error(dp[query.sql], truth)
        keys = (f"; keys released {released_keys(dp[query.sql], truth):.0%}"
                if query.private_keys else "")
        lines.append(f"| {table_name} | {query.label} | {dp_mae:.4g} | {sn_mae:.4g} | "
                     f"{sn_mae / dp_mae:.2f} | {dp_sensitivity[query.sql]:g}{keys} | "
                     f"{sn_delta} |")
    return lines


def main() -> None:
    """Build the data, run both engines, print the error table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="10 repetitions")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--smartnoise-python", default="/tmp/snenv/bin/python",
                        help="interpreter with smartnoise-sql installed (a separate venv)")
    args = parser.parse_args()
    repeats = 10 if args.quick else args.repeats
    if not (datasets_dir() / "adult.csv").exists():
        sys.exit(f"{datasets_dir() / 'adult.csv'} not found: set DPSQL_DATASETS")
    if not Path(args.smartnoise_python).exists():
        sys.exit(f"{args.smartnoise_python} not found: pass --smartnoise-python")
    started = time.perf_counter()
    duck_path, lite_path = build(args.workdir)
    exact = exact_answers(duck_path)
    dp, dp_sensitivity = run_dpsql(duck_path, args.epsilon, repeats)
    sn = run_smartnoise(args.smartnoise_python, lite_path, args.epsilon, repeats)
    print(f"\nε = {args.epsilon:g} per query, {repeats} repetitions, δ = {DELTA:g} for private "
          f"keys; {time.perf_counter() - started:.0f} s\n")
    print("\n".join(table(exact, dp, dp_sensitivity, sn)))


if __name__ == "__main__":
    main()
