"""Grouped DP statements on a small Spark table: where each exact query's time goes.

A local Spark session (``--master``, ``--conf key=value`` as often as needed) holds a cached
``visits`` view (``--people`` persons with 1-11 rows each over 7 days, as the tests' tables);
each statement runs through ``dpsql.connect(session, ...)`` and, for the breakdown, its exact
queries run again by hand: Spark's analysis, optimisation and physical planning (each timed on
its own), then the job. Medians of ``--repeats`` runs after one warm-up. At this size the data
takes no time: what is left is Spark's fixed cost per query, which is what made a small
grouped FILTER statement take 14-31 s in the tests.

    python benchmarks/spark_grouped.py --conf spark.sql.shuffle.partitions=1
"""

from __future__ import annotations

import os
import statistics
import time
import warnings

import click
import numpy as np

import dpsql

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
STATEMENTS = {
    "COUNT(*) GROUP BY": "SELECT day, COUNT(*) AS n FROM visits GROUP BY day",
    "FILTER, AVG GROUP BY": ("SELECT day, COUNT(*) FILTER (WHERE amount > 30) AS k, "
                             "AVG(amount) AS m, COUNT(*) AS n FROM visits GROUP BY day"),
    "COUNT(DISTINCT) GROUP BY": "SELECT day, COUNT(DISTINCT uid) AS n FROM visits GROUP BY day",
    "MEDIAN GROUP BY": "SELECT day, MEDIAN(amount) AS m FROM visits GROUP BY day",
}
METADATA = {"name": "spark_grouped", "budget": {"epsilon": 1e9}, "tables": {"visits": {
    "privacy_unit": "uid", "max_groups_per_unit": 3, "max_rows_per_group": 2,
    "columns": {"uid": "int", "day": {"type": "text", "values": DAYS},
                "amount": {"type": "float", "lower": 0, "upper": 100}}}}}


def session(master: str, confs: tuple[str, ...], people: int):
    """A local session with the visits view cached in the JVM."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName("dpsql-bench") \
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
    for conf in confs:
        key, value = conf.split("=", 1)
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    rng = np.random.default_rng(2)
    uid = np.repeat(np.arange(people), rng.integers(1, 12, people))
    rows = list(zip(uid.tolist(), rng.choice(DAYS, uid.size).tolist(),
                    np.round(rng.uniform(0, 100, uid.size), 2).tolist(), strict=True))
    with warnings.catch_warnings():  # pyspark warns about its pandas versions
        warnings.simplefilter("ignore")
        spark.createDataFrame(rows, "uid BIGINT, day STRING, amount DOUBLE").cache() \
            .createOrReplaceTempView("visits")
    spark.table("visits").count()
    return spark


def phases(spark, queries: list[str]) -> dict[str, float]:
    """Seconds in analysis, optimisation, physical planning and the job, summed over the
    statement's exact queries (run in UTC, as the backend runs them)."""
    spent = dict.fromkeys(("analyse", "optimise", "plan", "run"), 0.0)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    for sql in queries:
        start = time.perf_counter()
        frame = spark.sql(sql)
        analysed = time.perf_counter()
        execution = frame._jdf.queryExecution()
        execution.optimizedPlan()
        optimised = time.perf_counter()
        execution.executedPlan()
        planned = time.perf_counter()
        frame.collect()
        done = time.perf_counter()
        for key, seconds in zip(spent, (analysed - start, optimised - analysed,
                                        planned - optimised, done - planned), strict=True):
            spent[key] += seconds
    return spent


@click.command()
@click.option("--master", default="local[2]", show_default=True)
@click.option("--conf", "confs", multiple=True, help="a Spark setting, key=value")
@click.option("--people", default=1000, show_default=True)
@click.option("--repeats", default=3, show_default=True)
def main(master: str, confs: tuple[str, ...], people: int, repeats: int) -> None:
    """Print one row per statement: dpsql's wall time and Spark's phases (medians, s)."""
    spark = session(master, confs, people)
    with dpsql.connect(spark, metadata=METADATA, ledger=":memory:", insecure_seed=1) as con:
        print(f"{master} {' '.join(confs) or '(defaults)'}; load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(f"{'statement':26s} {'dpsql':>6s} {'analyse':>8s} {'optimise':>8s} "
              f"{'plan':>6s} {'run':>6s}")
        for label, sql in STATEMENTS.items():
            plan = con._engine.plan(sql, epsilon=1).release.statements[0]
            queries = [plan.exact_query.sql, *(query.sql for _, query in plan.histograms)]
            walls, spent = [], []
            for repeat in range(repeats + 1):
                start = time.perf_counter()
                con.execute(sql, epsilon=1).fetchall()
                wall = time.perf_counter() - start
                found = phases(spark, queries)
                if repeat:  # the first run warms the JVM's code for this shape
                    walls.append(wall)
                    spent.append(found)
            medians = [statistics.median(s[key] for s in spent) for key in spent[0]]
            print(f"{label:26s} {statistics.median(walls):6.2f} "
                  + " ".join(f"{m:{w}.2f}" for m, w in zip(medians, (8, 8, 6, 6), strict=True)))
    spark.stop()


if __name__ == "__main__":
    main()
