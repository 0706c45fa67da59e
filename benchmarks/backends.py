"""DP GROUP BY on 10^7 rows on each backend: DP/raw time ratio and time spent outside the database.

For each backend the same table (generated once, deterministic) is queried twice:

- raw: ``SELECT day, COUNT(*), SUM(amount) FROM t GROUP BY day`` through the backend's own
  driver, exact and without dpsql;
- DP: the same statement through ``dpsql.connect(...)``, which rewrites it (clamping, bounding,
  zero-fill), runs the exact bounded query in the backend, adds noise and charges the ledger.

"outside" is the DP wall time minus the time the backend spent running the exact query
(parse, analyze, rewrite, ledger, noise, post-processing). Two tables are measured: ``rows_t``
(row privacy: the target DP/raw <= 1.5) and ``people_t`` (a privacy unit with 10 rows per
person: the per-person bounding pass makes it inherently dearer). For ``people_t`` the
engine's own bound with window functions (``WINDOW``: 2 rows per person-day by ROW_NUMBER,
then 3 days per person) is timed too, and dpsql's plan must not be slower than it.

Run ``bash scripts/services.sh`` first for PostgreSQL and Java, then
``python benchmarks/backends.py --rows 10000000`` (about 10 minutes on 2 busy cores; the
generated data is cached in --work and reused).
"""

from __future__ import annotations

import json
import os
import statistics
import time
import warnings
from pathlib import Path

import click
import duckdb

import dpsql

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
RAW = "SELECT day, COUNT(*) AS n, SUM(amount) AS total FROM {table} GROUP BY day"
# the engine's own bound with window functions: 2 rows per person-day, then 3 days per person,
# each picked by a hash (the per-person plan's bounds on people_t)
WINDOW = ("WITH r AS (SELECT uid, day, amount, ROW_NUMBER() OVER (PARTITION BY uid, day ORDER BY "
          "{row_hash}) AS rn FROM people_t), c AS (SELECT uid, day, COUNT(*) AS n, "
          "SUM(amount) AS s FROM r WHERE rn <= 2 GROUP BY uid, day), g AS (SELECT uid, day, n, "
          "s, ROW_NUMBER() OVER (PARTITION BY uid ORDER BY {group_hash}) AS gn FROM c) "
          "SELECT day, SUM(n) AS n, SUM(s) AS total FROM g WHERE gn <= 3 GROUP BY day")
HASHES = {  # (row hash, group hash) in each engine's own functions
    "duckdb": ("hash(uid, day, amount)", "hash(uid, day)"),
    "postgresql": ("hashtextextended(concat_ws('|', uid, day, amount), 0)",
                   "hashtextextended(concat_ws('|', uid, day), 0)"),
    "spark": ("xxhash64(uid, day, amount)", "xxhash64(uid, day)"),
}
TABLES = ("rows_t", "people_t")
# a seeded source: with secure noise the engine would return a repeated query's stored answer
# instead of running it again, and there would be nothing to time
SEED = 0


def make_parquet(rows: int, folder: Path) -> Path:
    """``rows`` rows of (uid, day, amount), 10 per person, written once as Parquet."""
    path = folder / f"visits_{rows}.parquet"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        days = "[" + ", ".join(f"'{d}'" for d in DAYS) + "]"
        duckdb.sql(f"COPY (SELECT i // 10 AS uid, {days}[1 + CAST(hash(i) % 7 AS INTEGER)] AS day,"
                   f" CAST(hash(i * 7 + 1) % 10000 AS DOUBLE) / 100 AS amount "
                   f"FROM range({rows}) AS r(i)) TO '{path}' (FORMAT parquet)")
    return path


def metadata(source: Path | None) -> dict:
    """The two benchmark tables over the same rows (a source file for DuckDB and Spark)."""
    columns = {"uid": {"type": "int"}, "day": {"type": "text", "values": DAYS},
               "amount": {"type": "float", "lower": 0, "upper": 100}}
    tables = {
        "rows_t": {"privacy_unit": None, "columns": columns},
        "people_t": {"privacy_unit": "uid", "max_groups_per_unit": 3, "max_rows_per_group": 2,
                     "columns": columns},
    }
    if source is not None:
        for table in tables.values():
            table["source"] = str(source)
    return {"name": "bench", "neighbouring": "add_remove", "budget": {"epsilon": 1e6},
            "tables": tables}


class TimedBackend:
    """Wraps a backend to add up the time its exact queries take."""

    def __init__(self, backend) -> None:
        self.backend, self.seconds = backend, 0.0
        self.run = self._timed(backend.run)
        self.run_sql = self._timed(backend.run_sql)

    def __getattr__(self, name: str):
        return getattr(self.backend, name)  # name, dialect, sources, catalog, ...

    def _timed(self, run):
        def timed(*args):
            start = time.perf_counter()
            try:
                return run(*args)
            finally:
                self.seconds += time.perf_counter() - start
        return timed

    def close(self) -> None:
        """Close the wrapped backend."""
        self.backend.close()


def _seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(con, raw_run, table: str, repeat: int, engine: str) -> dict:
    """Median raw time, median DP time and median DP time spent outside the backend; for
    people_t also the median time of the engine's own window-function bound.

    Raw, window and DP runs alternate, so that the load of a shared machine weighs on all alike.
    """
    row_hash, group_hash = HASHES[engine]
    window = WINDOW.format(row_hash=row_hash, group_hash=group_hash) \
        if table == "people_t" else None
    sql = RAW.format(table=table)
    timed = TimedBackend(con._backend)
    con._engine.backend = timed
    raw_run(sql)  # warm caches the same way for both
    con.execute(sql, epsilon=1).fetchall()
    raw, dp, outside, bound = [], [], [], []
    for _ in range(repeat):
        raw.append(_seconds(lambda: raw_run(sql)))
        if window is not None:
            bound.append(_seconds(lambda: raw_run(window)))
        timed.seconds = 0.0
        dp.append(_seconds(lambda: con.execute(sql, epsilon=1).fetchall()))
        outside.append(dp[-1] - timed.seconds)
    raw_s, dp_s = statistics.median(raw), statistics.median(dp)
    window_s = statistics.median(bound) if bound else None
    return {"table": table, "raw_s": round(raw_s, 3), "dp_s": round(dp_s, 3),
            "ratio": round(dp_s / raw_s, 2), "outside_s": round(statistics.median(outside), 3),
            "window_s": None if window_s is None else round(window_s, 3),
            "dp_vs_window": None if window_s is None else round(dp_s / window_s, 2)}


def bench_duckdb(parquet: Path, repeat: int) -> list[dict]:
    """DuckDB over the Parquet file (the default embedded backend)."""
    raw = duckdb.connect()
    raw.execute(f"CREATE VIEW rows_t AS SELECT * FROM read_parquet('{parquet}')")
    raw.execute(f"CREATE VIEW people_t AS SELECT * FROM read_parquet('{parquet}')")
    with dpsql.connect(metadata=metadata(parquet), ledger=":memory:", insecure_seed=SEED) as con:
        return [measure(con, lambda sql: raw.execute(sql).fetchall(), t, repeat, "duckdb")
                for t in TABLES]


def load_postgres(url: str, parquet: Path, rows: int) -> None:
    """Copy the rows into PostgreSQL tables rows_t and people_t unless already there."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        for table in TABLES:
            present = con.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0]
            if present and con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] == rows:
                continue
            con.execute(f"DROP TABLE IF EXISTS {table}")
            con.execute(f"CREATE TABLE {table} (uid BIGINT, day TEXT, amount DOUBLE PRECISION)")
            csv = parquet.with_suffix(".csv")
            if not csv.exists():
                duckdb.sql(f"COPY (SELECT * FROM read_parquet('{parquet}')) TO '{csv}' "
                           "(HEADER false)")
            with con.cursor().copy(f"COPY {table} FROM STDIN (FORMAT csv)") as copy, \
                    csv.open("rb") as source:
                while chunk := source.read(1 << 20):
                    copy.write(chunk)
            con.execute(f"ANALYZE {table}")


def bench_postgres(url: str, parquet: Path, rows: int, repeat: int) -> list[dict]:
    """PostgreSQL over tables loaded from the same rows."""
    import psycopg

    load_postgres(url, parquet, rows)
    with psycopg.connect(url, autocommit=True) as raw, \
            dpsql.connect(url, metadata=metadata(None), ledger=":memory:",
                          insecure_seed=SEED) as con:
        return [measure(con, lambda sql: raw.execute(sql).fetchall(), t, repeat, "postgresql")
                for t in TABLES]


def bench_spark(master: str, parquet: Path, repeat: int) -> list[dict]:
    """Spark SQL (local mode by default) over the same Parquet file."""
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master(master).appName("dpsql-bench")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "4g").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        for table in TABLES:
            session.read.parquet(str(parquet)).createOrReplaceTempView(table)
        with dpsql.connect(session, metadata=metadata(None), ledger=":memory:",
                           insecure_seed=SEED) as con:
            return [measure(con, lambda sql: session.sql(sql).collect(), t, repeat, "spark")
                    for t in TABLES]
    finally:
        session.stop()


@click.command()
@click.option("--rows", default=10_000_000, show_default=True, help="rows of the table")
@click.option("--repeat", default=5, show_default=True, help="timed runs per query (median)")
@click.option("--backends", default="duckdb,postgresql,spark", show_default=True)
@click.option("--postgres", default="postgresql://dpsql@127.0.0.1:55432/postgres",
              show_default=True, help="PostgreSQL URL (scripts/services.sh starts one)")
@click.option("--spark", "spark_master", default="local[2]", show_default=True,
              help="Spark master URL")
@click.option("--work", type=click.Path(path_type=Path), default=Path("/tmp/dpsql-bench"),
              show_default=True, help="folder for the generated data")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def main(rows, repeat, backends, postgres, spark_master, work, as_json) -> None:
    """Time a DP GROUP BY against the raw GROUP BY on each backend."""
    warnings.simplefilter("ignore")  # pyspark's version warnings
    parquet = make_parquet(rows, work)
    runners = {"duckdb": lambda: bench_duckdb(parquet, repeat),
               "postgresql": lambda: bench_postgres(postgres, parquet, rows, repeat),
               "spark": lambda: bench_spark(spark_master, parquet, repeat)}
    results, load = [], os.getloadavg()[0]
    for name in backends.split(","):
        for row in runners[name]():
            results.append({"backend": name, **row})
            if not as_json:
                bound = "" if row["window_s"] is None else \
                    f"  window bound {row['window_s']:7.3f}s  dp/window {row['dp_vs_window']:5.2f}"
                click.echo(f"{name:10} {row['table']:9} raw {row['raw_s']:7.3f}s  "
                           f"dp {row['dp_s']:7.3f}s  ratio {row['ratio']:5.2f}  "
                           f"outside {row['outside_s']:6.3f}s{bound}", err=False)
    if as_json:
        click.echo(json.dumps({"rows": rows, "repeat": repeat, "query": RAW,
                               "results": results}))
    else:
        click.echo(f"load average (1 min) before / after: {load:.2f} / "
                   f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
