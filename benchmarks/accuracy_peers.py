"""Accuracy first: dpsql against OpenDP, SmartNoise SQL and Qrlew on one workload, one run.

Run: ``python benchmarks/accuracy_peers.py [--rows 1000000] [--releases 20] [--quick]``

Each peer runs in its own interpreter (a venv per peer, so their pins do not meet dpsql's):
``--opendp-python`` (``pip install "opendp[polars]==0.16.0"``), ``--smartnoise-python``
(``pip install smartnoise-sql==1.0.10``) and ``--qrlew-python`` (``pip install pyqrlew==0.9.27
duckdb``). A peer whose interpreter is missing or fails keeps its column, with "n/a" and the
reason printed under the table.

Data (generated, seed 20261123, see ``generate``): ``people`` has one row per person (row
privacy): ``edu`` (16 public values, skewed), ``income`` (log-normal, median ≈ 40,000,
top-coded at the declared upper bound 500,000: 0.08 % of people) and ``age`` (18..90).
``visits`` has ``rows`` rows from ``rows / 10`` users (the first people), 1 + Poisson(9)
visits each, spread over 2 to 6 distinct days of the user (``visit_day``, 7 public values;
``day`` is a keyword in SmartNoise's grammar) and ``amount`` (gamma, bounds [0, 100]). A user
has about 10 rows on
about 4 days, so the declared bounds of Q2, at most 3 days and at most 2 rows per user-day,
drop rows: the error of Q2 against the exact answer is mostly the bias of contribution
bounding.

Statements, ε = 1 each (exact answers: DuckDB, unbounded, unclamped):

- Q1 (people, row privacy): ``SELECT edu, COUNT(*), SUM(income), AVG(age) ... GROUP BY edu``
- Q2 (visits, per user): ``SELECT visit_day, COUNT(*), SUM(amount) ... GROUP BY visit_day``
  with ≤ 3 days per user and ≤ 2 rows per user-day declared to each engine as it can take it.
- Multi-aggregate statements in the style of SmartNoise's tests (people, row privacy), dpsql
  against SmartNoise at the same nominal ε = 1 (SmartNoise reads ``Privacy(epsilon=1)`` per
  noisy column, so it spends more than 1 in all; the report says how much).

Calibration per engine (each its own idiom):

- dpsql: the catalogue declares the bounds; a fresh connection and throw-away ledger per
  release. Q2 also runs with bounds the engine chooses itself with ``Connection.tune``
  (tuning ε 0.1 + query ε 0.9 = 1); the proposals are printed under the tables.
- OpenDP 0.16: the Polars Context API (OpenDP's transformations and measurements on a
  LazyFrame, no SQL): ``dp.len()``, ``.dp.sum(bounds)``, ``.dp.mean(bounds)`` grouped by public
  keys (``with_keys``), Q2 with ``truncate_per_group(2)`` and ``truncate_num_groups(3)`` over
  the user identifier. One Context of ε = releases, split evenly: ε = 1 per release.
- SmartNoise SQL 1.0.10: the private reader on a SQLite copy; ``Privacy(epsilon)`` is per noisy
  column, so for Q1/Q2 it gets ε = 1 divided by the columns its odometer charges; Q2 declares
  ``max_ids: 6`` (3 days × 2 rows, the only per-user bound it has); keys are public
  (``censor_dims: false``).
- Qrlew 0.9.27: ``rewrite_with_differential_privacy`` of the SQL with ε = 1, δ = 1e-6 (its
  mechanism is Gaussian and needs δ), its own defaults for contribution bounds
  (``max_multiplicity`` 100 rows per user and table share 0.1), value ranges and public keys
  declared with ``with_range``/``with_possible_values``; the rewritten query (noise drawn in
  SQL) runs on DuckDB from Parquet.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

import dpsql
from error_vs_smartnoise import EDUCATION, smartnoise_releases

SEED = 20261123
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
EPSILON = 1.0
TUNE_EPSILON = 0.1  # of Q2's ε = 1, when dpsql chooses its own bounds
QRLEW_DELTA = 1e-6
INCOME = (0, 500_000)
AGE = (18, 90)
AMOUNT = (0, 100)
MAX_DAYS, MAX_PER_DAY = 3, 2
PEERS = ("dpsql", "OpenDP 0.16", "SmartNoise SQL 1.0.10", "Qrlew 0.9.27")


@dataclass(frozen=True)
class Statement:
    """One statement: its keys column, its aggregate columns (output names), its table."""

    name: str
    sql: str
    table: str
    key: str
    columns: tuple[str, ...]

    def on(self, schema: str) -> str:
        return self.sql.replace(f" FROM {self.table}", f" FROM {schema}.{self.table}")


Q1 = Statement("Q1", "SELECT edu, COUNT(*) AS n, SUM(income) AS income, AVG(age) AS age "
               "FROM people GROUP BY edu", "people", "edu", ("n", "income", "age"))
Q2 = Statement("Q2", "SELECT visit_day, COUNT(*) AS n, SUM(amount) AS amount FROM visits "
               "GROUP BY visit_day", "visits", "visit_day", ("n", "amount"))
MULTI = [
    Statement("SUM+AVG+AVG", "SELECT edu, SUM(age) AS s, AVG(age) AS a, AVG(income) AS b "
              "FROM people GROUP BY edu", "people", "edu", ("s", "a", "b")),
    Statement("COUNT+VAR", "SELECT edu, COUNT(*) AS n, VARIANCE(age) AS v FROM people GROUP BY edu",
              "people", "edu", ("n", "v")),
    Statement("SUM+COUNT", "SELECT edu, SUM(income) AS s, COUNT(*) AS n FROM people "
              "GROUP BY edu", "people", "edu", ("s", "n")),
]
LABELS = {("Q1", "n"): "Q1 COUNT", ("Q1", "income"): "Q1 SUM(income)",
          ("Q1", "age"): "Q1 AVG(age)", ("Q2", "n"): "Q2 COUNT vs exact",
          ("Q2", "amount"): "Q2 SUM(amount) vs exact"}


def generate(rows: int, seed: int = SEED) -> dict[str, pd.DataFrame]:
    """people (``rows`` persons) and visits (``rows`` rows of ``rows // 10`` users)."""
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.full(len(EDUCATION), 5.0))
    people = pd.DataFrame({
        "uid": np.arange(rows),
        "edu": np.array(EDUCATION)[rng.choice(len(EDUCATION), rows, p=weights)],
        # top-coded at the declared upper bound, as surveys publish it: no clamping bias
        "income": np.round(np.minimum(rng.lognormal(np.log(40_000), 0.8, rows), INCOME[1]), 2),
        "age": rng.integers(AGE[0], AGE[1] + 1, rows)})
    users = max(rows // 10, 1)
    counts = 1 + rng.poisson(9, users)
    counts = np.maximum(np.round(counts * rows / counts.sum()).astype(int), 1)  # ≈ rows in all
    uid = np.repeat(np.arange(users), counts)
    days_of_user = rng.integers(2, 7, users)  # 2..6 distinct days per user
    order = np.argsort(rng.random((users, 7)), axis=1)  # each user's days in random order
    slot = (rng.random(uid.size) * days_of_user[uid]).astype(int)
    visits = pd.DataFrame({
        "uid": uid, "visit_day": np.array(DAYS)[order[uid, slot]],
        "amount": np.round(rng.gamma(2.0, 12.0, uid.size), 2)})
    return {"people": people, "visits": visits}


def build(workdir: Path, rows: int) -> dict[str, Path]:
    """DuckDB file (dpsql, exact answers), SQLite file (SmartNoise) and Parquet files (OpenDP,
    Qrlew) of the same tables; reused when present for the same size and seed."""
    stem = workdir / f"accuracy-{rows}-{SEED}"
    paths = {"duckdb": stem.with_suffix(".duckdb"), "sqlite": stem.with_suffix(".sqlite"),
             "people": Path(f"{stem}-people.parquet"), "visits": Path(f"{stem}-visits.parquet")}
    if all(p.exists() for p in paths.values()):
        return paths
    for path in paths.values():
        path.unlink(missing_ok=True)
    frames = generate(rows)
    with duckdb.connect(str(paths["duckdb"])) as duck, sqlite3.connect(paths["sqlite"]) as lite:
        for name, frame in frames.items():
            duck.register("frame", frame)
            duck.execute(f"CREATE TABLE {name} AS SELECT * FROM frame")
            duck.unregister("frame")
            duck.execute(f"COPY {name} TO '{paths[name]}' (FORMAT PARQUET)")
            frame.to_sql(name, lite, index=False, chunksize=100_000)
    return paths


def dpsql_metadata(days: int = MAX_DAYS, per_day: int = MAX_PER_DAY) -> dict:
    """Catalogue: the declared bounds of the workload (visits: ``days`` × ``per_day``), and
    what a NULL is read as (the lower bound, as OpenDP's runner ``fill_null``s)."""
    people = {"uid": {"type": "int"}, "edu": {"type": "text", "values": EDUCATION},
              "income": {"type": "float", "lower": INCOME[0], "upper": INCOME[1],
                         "missing_value": INCOME[0]},
              "age": {"type": "int", "lower": AGE[0], "upper": AGE[1],
                      "missing_value": AGE[0]}}
    visits = {"uid": {"type": "int"}, "visit_day": {"type": "text", "values": DAYS},
              "amount": {"type": "float", "lower": AMOUNT[0], "upper": AMOUNT[1],
                         "missing_value": AMOUNT[0]}}
    return {"name": "accuracy-peers", "budget": {"epsilon": 1e12, "delta": 0.5}, "tables": {
        "people": {"privacy_unit": None, "columns": people},
        "visits": {"privacy_unit": "uid", "max_groups_per_unit": days,
                   "max_rows_per_group": per_day, "columns": visits}}}


def smartnoise_metadata() -> dict:
    """SmartNoise SQL metadata: same clamping bounds; max_ids = 3 days × 2 rows."""
    # no missing_value: with one, SmartNoise 1.0.10 releases SUM of that column exactly,
    # without noise (its rewrite wraps the column in COALESCE and no mechanism is attached)
    people = {"row_privacy": True, "censor_dims": False, "edu": {"type": "string"},
              "uid": {"type": "int"},
              "income": {"type": "float", "lower": INCOME[0], "upper": INCOME[1]},
              "age": {"type": "int", "lower": AGE[0], "upper": AGE[1]}}
    visits = {"max_ids": MAX_DAYS * MAX_PER_DAY, "row_privacy": False, "censor_dims": False,
              "uid": {"type": "int", "private_id": True}, "visit_day": {"type": "string"},
              "amount": {"type": "float", "lower": AMOUNT[0], "upper": AMOUNT[1]}}
    return {"bench": {"b": {"people": people, "visits": visits}}}


def to_cells(statement: Statement, rows) -> dict:
    """{(key, column): value} of one release; the key is the first column of each row."""
    return {(row[0], column): (None if value is None else float(value))
            for row in rows for column, value in zip(statement.columns, row[1:])}


def exact_answers(duck_path: Path, statements: list[Statement]) -> dict[str, dict]:
    with duckdb.connect(str(duck_path), read_only=True) as duck:
        return {s.name: to_cells(s, duck.execute(s.sql).fetchall()) for s in statements}


def mae_per_column(releases: list[dict], exact: dict, column: str) -> float:
    """Mean absolute error over every key and release; a missing or NULL cell counts as 0."""
    errors = [abs((run.get(cell) or 0.0) - value) for run in releases
              for cell, value in exact.items() if cell[1] == column]
    return float(np.mean(errors))


def run_dpsql(duck_path: Path, statements: list[Statement], releases: int) -> dict:
    """{name: [cells per release]}; Q2 also as "Q2 tuned" when the connection can tune."""
    out: dict[str, list | str] = {s.name: [] for s in statements}
    meta = dpsql_metadata()
    for _ in range(releases):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            con = dpsql.connect(str(duck_path), metadata=meta, ledger=":memory:")
        with con:
            for s in statements:
                out[s.name].append(to_cells(s, con.execute(s.sql, epsilon=EPSILON).fetchall()))
            if Q2 in statements:
                tuned = out.setdefault("Q2 tuned", [])
                if isinstance(tuned, list):
                    out["Q2 tuned"] = dpsql_tuned(con, tuned, duck_path,
                                                  out.setdefault("Q2 tuned bounds", []))
    return out


def run_dpsql_bounds(duck_path: Path, bounds: list[tuple[int, int]], releases: int) -> dict:
    """Q2 under other declared (days, rows per day), at the query's share of ε once tuned
    (EPSILON − TUNE_EPSILON). The bounds are picked by hand, looking at the data, so these
    rows are not a private answer: they show what bounds ``tune`` has to find."""
    out = {}
    for days, per_day in bounds:
        meta, runs = dpsql_metadata(days, per_day), []
        for _ in range(releases):
            runs.append(release_q2(duck_path, meta))
        out[(days, per_day)] = runs
    return out


def release_q2(duck_path: Path, meta: dict) -> dict:
    """One release of Q2 under ``meta`` at the query's share of ε (EPSILON − TUNE_EPSILON)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        con = dpsql.connect(str(duck_path), metadata=meta, ledger=":memory:")
    with con:
        return to_cells(Q2, con.execute(Q2.sql, epsilon=EPSILON - TUNE_EPSILON).fetchall())


def bounds_table(exact: dict, runs: dict) -> list[str]:
    lines = [f"| Q2, dpsql, declared days × rows per day, ε {EPSILON - TUNE_EPSILON:g} | "
             "COUNT MAE (mean signed error) | SUM(amount) MAE (mean signed error) |",
             "|---|---:|---:|"]
    for (days, per_day), releases in runs.items():
        lines.append(f"| {days} × {per_day} | "
                     + " | ".join(cell_text(releases, exact["Q2"], c, True) for c in Q2.columns)
                     + " |")
    return lines


def dpsql_tuned(con, tuned: list, duck_path: Path, proposals: list):
    """One release of Q2 with bounds dpsql chooses: ``Connection.tune`` spends TUNE_EPSILON
    on DP quantiles of the visits table (per person: rows, days, rows on the busiest day)
    and proposes the contribution bounds for Q2's GROUP BY and its count's noise as planned;
    Q2 then runs under them at the rest of ε. The amount's [0, 100] stays declared (it is
    public here). Each proposal (L0, L∞, R or None) is appended to ``proposals``."""
    try:
        proposal = con.tune("visits", epsilon=TUNE_EPSILON, query=Q2.sql, columns=[],
                            query_epsilon=EPSILON - TUNE_EPSILON)
        meta = dpsql_metadata()
        spec = proposal.metadata["tables"]["visits"]
        visits = meta["tables"]["visits"]
        for key in ("max_groups_per_unit", "max_rows_per_group", "max_rows_per_unit"):
            if key in spec:
                visits[key] = spec[key]
        proposals.append(tuple(spec.get(key) for key in (
            "max_groups_per_unit", "max_rows_per_group", "max_rows_per_unit")))
        for name, bounds in spec.get("columns", {}).items():
            visits["columns"][name].update(bounds)
        tuned.append(release_q2(duck_path, meta))
    except (TypeError, dpsql.Error) as err:
        return f"n/a: tune() failed: {str(err).splitlines()[0]}"
    return tuned


def run_smartnoise(python: str, sqlite: Path, statements: list[Statement], releases: int,
                   nominal: bool) -> dict:
    job = {"sqlite": str(sqlite), "epsilon": EPSILON, "delta": 0.0, "repeats": releases,
           "nominal": nominal, "metadata": smartnoise_metadata(),
           "queries": [(s.on("b"), s.table) for s in statements]}
    raw = smartnoise_releases(python, job)
    return {s.name: [to_cells(s, rows) for rows in raw[s.on("b")]["rows"]] for s in statements} \
        | {f"{s.name} columns": raw[s.on("b")]["columns"] for s in statements}


OPENDP = textwrap.dedent("""
    import json, sys
    import polars as pl
    import opendp.prelude as dp
    dp.enable_features("contrib")
    job = json.load(sys.stdin)
    releases, eps = job["releases"], job["epsilon"]
    margin = [dp.polars.Margin(by=(), max_length=job["max_length"])]
    people = pl.scan_parquet(job["people"])
    visits = pl.scan_parquet(job["visits"])
    edu = pl.LazyFrame({"edu": job["edu"]})
    days = pl.LazyFrame({"visit_day": job["days"]})
    (ilo, ihi), (alo, ahi), (mlo, mhi) = job["income"], job["age"], job["amount"]
    def context(data, unit):  # a fresh Context of ε per release: one query each
        return dp.Context.compositor(data=data, privacy_unit=unit,
                                     privacy_loss=dp.loss_of(epsilon=eps),
                                     split_evenly_over=1, margins=margin)
    out = {"Q1": [], "Q2": []}
    for _ in range(releases):
        q1 = context(people, dp.unit_of(contributions=1))
        q2 = context(visits, dp.unit_of(contributions=1, identifier="uid"))
        query = (q1.query().group_by("edu").agg([
            dp.len().alias("n"),
            pl.col("income").cast(pl.Float64).fill_null(0.0).dp.sum((float(ilo), float(ihi)))
              .alias("income"),
            pl.col("age").cast(pl.Int64).fill_null(0).dp.mean((alo, ahi)).alias("age")])
            .with_keys(edu))
        out["Q1"].append(query.release().collect().select("edu", "n", "income", "age").rows())
        query = (q2.query().truncate_per_group(job["per_day"], by=["visit_day"])
                 # keep="sample" (the default) fails on polars 1.36.1 (DuplicateError in
                 # the struct it hashes); "first" is the other documented choice
                 .truncate_num_groups(job["days_per_user"], by=["visit_day"], keep="first")
                 .group_by("visit_day").agg([
                     dp.len().alias("n"),
                     pl.col("amount").cast(pl.Float64).fill_null(0.0)
                       .dp.sum((float(mlo), float(mhi))).alias("amount")])
                 .with_keys(days))
        out["Q2"].append(query.release().collect().select("visit_day", "n", "amount").rows())
        print("release", file=sys.stderr, flush=True)
    print(json.dumps(out, default=float))
""")


PEER_TIMEOUT = 1500.0  # seconds a peer's subprocess may take before its column is "n/a"


def run_peer(python: str, script: str, job: dict) -> dict:
    """Run a peer's script in its interpreter; the JSON it prints."""
    done = subprocess.run([python, "-c", script], input=json.dumps(job), capture_output=True,
                          text=True, timeout=PEER_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                           else f"exit {done.returncode}")
    *printed, answer = done.stdout.strip().splitlines()
    if printed:  # the peer's library printed before the answer
        print(f"{script.split(chr(10))[3][:40]}…: " + " / ".join(printed)[:500], file=sys.stderr)
    return json.loads(answer)


def run_opendp(python: str, paths: dict, rows: int, releases: int) -> dict:
    job = {"people": str(paths["people"]), "visits": str(paths["visits"]), "edu": EDUCATION,
           "days": DAYS, "income": INCOME, "age": AGE, "amount": AMOUNT, "epsilon": EPSILON,
           "releases": releases, "max_length": 2 * rows, "per_day": MAX_PER_DAY,
           "days_per_user": MAX_DAYS}
    raw = run_peer(python, OPENDP, job)
    return {"Q1": [to_cells(Q1, r) for r in raw["Q1"]],
            "Q2": [to_cells(Q2, r) for r in raw["Q2"]]}


QRLEW = textwrap.dedent("""
    import json, sys
    import duckdb, sqlalchemy
    import pyqrlew as qrl
    job = json.load(sys.stdin)
    # schema, types and table sizes (Qrlew reads COUNT(*)) from the SQLite copy; no ranges or
    # values read from the data: bounds and keys are declared
    ds = qrl.Dataset.from_database("bench", sqlalchemy.create_engine(f"sqlite:///{job['sqlite']}"))
    for table, column, (lo, hi) in job["ranges"]:
        ds = ds.with_range(None, table, column, float(lo), float(hi))
    for table, column, values in job["values"]:
        ds = ds.with_possible_values(None, table, column, values)
    duck = duckdb.connect()
    duck.execute("SET enable_progress_bar = false")  # it draws on stdout, where the answer goes
    for table in ("people", "visits"):
        duck.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{job[table]}')")
    out = {}
    for name, (sql, unit, columns) in job["queries"].items():
        unit = (unit[0], [tuple(step) for step in unit[1]], unit[2])
        rewritten = ds.relation(sql).rewrite_with_differential_privacy(
            ds, [unit], {"epsilon": job["epsilon"], "delta": job["delta"]})
        noisy = rewritten.relation().to_query()  # PostgreSQL dialect; DuckDB runs it
        out[name] = [duck.execute(noisy).df()[columns].values.tolist()
                     for _ in range(job["releases"])]
        out[name + " event"] = str(rewritten.dp_event())
        print(name, file=sys.stderr, flush=True)
    print(json.dumps(out, default=float))
""")


def run_qrlew(python: str, paths: dict, releases: int) -> dict:
    units = {"people": ["people", [], "_PRIVACY_UNIT_ROW_"], "visits": ["visits", [], "uid"]}
    job = {"people": str(paths["people"]), "visits": str(paths["visits"]),
           "sqlite": str(paths["sqlite"]), "epsilon": EPSILON, "delta": QRLEW_DELTA,
           "releases": releases,
           "ranges": [("people", "income", INCOME), ("people", "age", AGE),
                      ("visits", "amount", AMOUNT)],
           "values": [("people", "edu", EDUCATION), ("visits", "visit_day", DAYS)],
           "queries": {s.name: (s.sql, units[s.table], [s.key, *s.columns]) for s in (Q1, Q2)}}
    raw = run_peer(python, QRLEW, job)
    return {"Q1": [to_cells(Q1, r) for r in raw["Q1"]],
            "Q2": [to_cells(Q2, r) for r in raw["Q2"]],
            "events": {name: raw[f"{name} event"] for name in ("Q1", "Q2")}}


def multi(nominal: dict, spent: dict) -> dict:
    """SmartNoise's multi-aggregate releases at nominal ε and at ε = 1 per statement (ε
    divided by the columns it charges), keyed apart from its Q1 and Q2 ones."""
    return {f"nominal {key}": value for key, value in nominal.items()} \
        | {f"spent {key}": value for key, value in spent.items()}


def fmt(value: float) -> str:
    if abs(value) >= 1e5:
        return f"{value / 1e6:.3g} M"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def main_table(exact: dict, results: dict[str, dict | str]) -> list[str]:
    """MAE per cell; Q2 also as a share of the mean exact cell (the bias of bounding)."""
    lines = ["| mean absolute error per cell | " + " | ".join(PEERS) + " |",
             "|---|" + "---:|" * len(PEERS)]
    dpsql_tuned = results["dpsql"]["Q2 tuned"] if isinstance(results["dpsql"], dict) else None
    for (name, column), label in LABELS.items():
        cells = []
        for peer in PEERS:
            res = results[peer]
            if isinstance(res, str) or not isinstance(res.get(name), list) or not res[name]:
                cells.append("n/a")
                continue
            cells.append(cell_text(res[name], exact[name], column, name == "Q2"))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        if name == "Q2":
            text = (cell_text(dpsql_tuned, exact[name], column, True)
                    if isinstance(dpsql_tuned, list) and dpsql_tuned else
                    (dpsql_tuned or "n/a"))
            lines.append(f"| {label}, dpsql tuned (ε {TUNE_EPSILON:g} + "
                         f"{EPSILON - TUNE_EPSILON:g}) | {text} |" + " |" * (len(PEERS) - 1))
    return lines


def cell_text(releases: list[dict], exact: dict, column: str, signed: bool) -> str:
    mae = mae_per_column(releases, exact, column)
    if not signed:
        return fmt(mae)
    truth = [v for cell, v in exact.items() if cell[1] == column]
    bias = np.mean([(run.get(cell) or 0.0) - v for run in releases
                    for cell, v in exact.items() if cell[1] == column])
    return f"{fmt(mae)} ({bias / np.mean(truth):+.1%})"


def ratios(exact: dict, results: dict) -> list[str]:
    """Each peer's MAE over dpsql's, per cell (> 1: dpsql closer to the truth)."""
    lines = ["| peer MAE / dpsql MAE | " + " | ".join(PEERS[1:]) + " |",
             "|---|" + "---:|" * (len(PEERS) - 1)]
    for (name, column), label in LABELS.items():
        base = mae_per_column(results["dpsql"][name], exact[name], column)
        cells = []
        for peer in PEERS[1:]:
            res = results[peer]
            ok = not isinstance(res, str) and isinstance(res.get(name), list) and res[name]
            cells.append(f"{mae_per_column(res[name], exact[name], column) / base:.2f}" if ok
                         else "n/a")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def multi_table(exact: dict, dp: dict, sn: dict | str) -> list[str]:
    """dpsql at ε = 1 against SmartNoise at nominal ε = 1 (ε per column) and at ε = 1 per
    statement."""
    lines = ["| statement | column | dpsql MAE | SmartNoise MAE, nominal ε | dpsql / SmartNoise "
             "| SmartNoise MAE, same ε spent | dpsql / SmartNoise |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for s in MULTI:
        for column in s.columns:
            mine = mae_per_column(dp[s.name], exact[s.name], column)
            if isinstance(sn, str):
                lines.append(f"| {s.name} | {column} | {fmt(mine)} | n/a | n/a | n/a | n/a |")
                continue
            nominal = mae_per_column(sn[s.name], exact[s.name], column)
            spent = mae_per_column(sn[f"{s.name} spent"], exact[s.name], column)
            lines.append(f"| {s.name} | {column} | {fmt(mine)} | {fmt(nominal)} | "
                         f"{mine / nominal:.2f} | {fmt(spent)} | {mine / spent:.2f} |")
    if not isinstance(sn, str):
        lines.append("\nSmartNoise's odometer charges per statement (ε per column × columns): "
                     + ", ".join(f"{s.name} {sn[f'{s.name} columns']}" for s in MULTI))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--releases", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="10⁵ rows, 5 releases")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--opendp-python", default="/tmp/peers-opendp/bin/python")
    parser.add_argument("--smartnoise-python", default="/tmp/peers-snsql/bin/python")
    parser.add_argument("--qrlew-python", default="/tmp/peers-qrlew/bin/python")
    parser.add_argument("--q2-bounds", nargs="*", default=["3x2", "7x4", "7x6", "7x10", "7x16"],
                        help="dpsql Q2 also under these declared DAYSxROWS (hand-picked)")
    parser.add_argument("--peers", nargs="*", default=list(PEERS[1:]),
                        help="which peers to run (default all)")
    args = parser.parse_args()
    rows, releases = (100_000, 5) if args.quick else (args.rows, args.releases)
    started = time.perf_counter()
    paths = build(args.workdir, rows)
    exact = exact_answers(paths["duckdb"], [Q1, Q2, *MULTI])
    print(f"data ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    results: dict[str, dict | str] = {p: "n/a: not run" for p in PEERS}
    timings = {}

    def attempt(peer: str, python: str | None, run) -> None:
        if peer != "dpsql" and peer not in args.peers:
            return
        if python is not None and not Path(python).exists():
            results[peer] = f"n/a: {python} not found"
            return
        t0 = time.perf_counter()
        try:
            results[peer] = run()
        except Exception as err:  # a peer that fails keeps its column, with the reason
            results[peer] = f"n/a: {type(err).__name__}: {str(err)[:300]}"
        timings[peer] = time.perf_counter() - t0
        print(f"{peer}: {timings[peer]:.0f} s", file=sys.stderr)

    # the peers run in their own processes, side by side; dpsql in this one meanwhile
    with ThreadPoolExecutor(max_workers=3) as pool:
        pool.submit(attempt, "OpenDP 0.16", args.opendp_python,
                    lambda: run_opendp(args.opendp_python, paths, rows, releases))
        pool.submit(attempt, "SmartNoise SQL 1.0.10", args.smartnoise_python,
                    lambda: run_smartnoise(args.smartnoise_python, paths["sqlite"],
                                           [Q1, Q2], releases, nominal=False)
                    | multi(run_smartnoise(args.smartnoise_python, paths["sqlite"], MULTI,
                                           releases, nominal=True),
                            run_smartnoise(args.smartnoise_python, paths["sqlite"], MULTI,
                                           releases, nominal=False)))
        pool.submit(attempt, "Qrlew 0.9.27", args.qrlew_python,
                    lambda: run_qrlew(args.qrlew_python, paths, releases))
        attempt("dpsql", None, lambda: run_dpsql(paths["duckdb"], [Q1, Q2, *MULTI], releases))
        what_if = run_dpsql_bounds(paths["duckdb"], [tuple(map(int, b.split("x")))
                                                     for b in args.q2_bounds], releases)
    sn = results["SmartNoise SQL 1.0.10"]
    sn_multi = ({s.name: sn[f"nominal {s.name}"] for s in MULTI}
                | {f"{s.name} columns": sn[f"nominal {s.name} columns"] for s in MULTI}
                | {f"{s.name} spent": sn[f"spent {s.name}"] for s in MULTI}
                if isinstance(sn, dict) else sn)
    load = os.getloadavg()
    per_day = [exact["Q2"][(day, "n")] for day in DAYS]
    print(f"\n{rows:,} rows per table, ε = {EPSILON:g} per statement, {releases} releases; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 cores); "
          f"{time.perf_counter() - started:.0f} s; Q2 exact COUNT per day "
          f"≈ {np.mean(per_day):,.0f}\n")
    print("\n".join(main_table(exact, results)))
    print()
    if isinstance(results["dpsql"], dict):
        print("\n".join(ratios(exact, results)))
        print(f"\nMulti-aggregate statements at nominal ε = {EPSILON:g} (SmartNoise "
              f"Privacy(epsilon={EPSILON:g}) per column):\n")
        print("\n".join(multi_table(exact, results["dpsql"], sn_multi)))
        proposed = results["dpsql"].get("Q2 tuned bounds") or []
        if proposed:
            counts = sorted({b: proposed.count(b) for b in proposed}.items(),
                            key=lambda item: -item[1])
            print("\nQ2 bounds tune proposed (L0, L∞, R: releases): "
                  + ", ".join(f"{b}: {n}" for b, n in counts))
        if what_if:
            print("\nQ2 under hand-picked bounds (not private; what tune has to find):\n")
            print("\n".join(bounds_table(exact, what_if)))
    for peer in PEERS:
        if isinstance(results[peer], str):
            print(f"\n{peer}: {results[peer]}")
        elif peer in timings:
            print(f"\n{peer}: {timings[peer]:.0f} s", end="")
    print()
    qrlew = results["Qrlew 0.9.27"]
    if isinstance(qrlew, dict):
        for name, event in qrlew["events"].items():
            print(f"Qrlew {name} DpEvent: {event}")


if __name__ == "__main__":
    main()
