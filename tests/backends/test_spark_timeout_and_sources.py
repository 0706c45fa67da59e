"""Spark at run time: a query past its time limit has its jobs cancelled (a private one charged
as on DuckDB and PostgreSQL), a job that fails is charged, and a ``source`` file replaced after
connect is read whole, as it is now, or refused on D and D′ alike."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DAYS, catalogue, make_adult, make_visits
from servers import cancelled_while_reading, spark  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb

import dpsql

pytestmark = pytest.mark.spark

# one person with 20,000 rows: the self-join on the unit makes 4·10^8 of their rows, minutes
# on a local session
SLOW = "SELECT SUM(v.amount * w.amount / 100) AS s FROM visits v JOIN visits w ON v.uid = w.uid"


@pytest.fixture
def heavy(tmp_path) -> dict:
    """The test catalogue over visits with one person of 20,000 rows, and a one-row adult."""
    rows = pd.DataFrame({"uid": 10**6, "day": [DAYS[i % 7] for i in range(20_000)],
                         "amount": [i % 100 for i in range(20_000)], "region_id": 0})
    pd.concat([make_visits(), rows]).to_csv(tmp_path / "visits.csv", index=False)
    make_adult(1).to_csv(tmp_path / "adult.csv", index=False)
    return catalogue(tmp_path)


def _idle(spark, within: float = 30) -> bool:
    """Whether the session runs no job within ``within`` seconds (a cancelled job ends)."""
    deadline = time.monotonic() + within
    while spark.sparkContext.statusTracker().getActiveJobsIds():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


# --- timeout= --------------------------------------------------------------------------------

def test_a_query_still_planned_at_its_deadline_is_stopped(spark, heavy):
    """A deadline that passes before the query's first job: Spark cancels a cancelled
    group's later result jobs when they are submitted, but not the shuffle stages adaptive
    execution submits as jobs of their own (DAGScheduler.handleMapStageSubmitted), so one
    cancel at the deadline let this cross join run its 9·10^8 rows to the end (a minute or
    more). The group is cancelled again until the query has ended."""
    sql = ("SELECT k, COUNT(*) AS n FROM (SELECT (a.id * b.id) % 7 AS k FROM range(30000) a "
           "CROSS JOIN range(30000) b) GROUP BY k")
    spark.conf.set("spark.sql.autoBroadcastJoinThreshold", "-1")  # no broadcast job first
    try:
        with dpsql.connect(spark, metadata=heavy, ledger=":memory:") as con:
            started = time.monotonic()
            with pytest.raises(dpsql.QueryTimeoutError, match="longer than 0.05 s"):
                con._backend.run_sql(sql, 0.05)
            assert time.monotonic() - started < 30 and _idle(spark)
    finally:
        spark.conf.unset("spark.sql.autoBroadcastJoinThreshold")


def test_a_query_past_the_timeout_is_cancelled_and_charged_once(spark, heavy):
    """timeout= was refused on Spark ('set the cluster's own limit'). The query's jobs are
    cancelled at the deadline, those it starts later too: pyspark's interruptTag from another
    thread finds no tag (its tags are the calling thread's) and a plain cancelJobGroup missed a
    query still planning, whose jobs then ran to the end."""
    context = spark.sparkContext
    context.setJobGroup("caller", "the caller's own group")
    try:
        with dpsql.connect(spark, metadata=heavy, ledger=":memory:", timeout=2) as con:
            started = time.monotonic()
            with pytest.raises(dpsql.QueryTimeoutError, match="longer than the timeout of 2 s"
                               ) as stopped:
                con.execute(SLOW, epsilon=1)
            assert time.monotonic() - started < 60
            assert stopped.value.epsilon_spent == 1 and "charged" in stopped.value.message
            (charge,) = con.ledger.history()
            assert charge["statement"].startswith("-- failed on the data")
            assert _idle(spark)  # cancelled, not left running
            assert context.getLocalProperty("spark.jobGroup.id") == "caller"
            # the next query runs in a group of its own (a generous timeout: a loaded
            # machine's local session takes seconds for any query)
            assert con._backend.run_sql("SELECT COUNT(*) FROM range(10)", 600) == (
                ["count(1)"], [(10,)])
    finally:
        for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
            context.setLocalProperty(key, None)


def test_a_clients_cancel_stops_the_running_jobs_charged(spark, heavy):
    """The server's CancelRequest (backends/cancel.py) cancels the statement's job group, as
    the timeout does: QueryCanceledError (57014), charged (its read began after the charge);
    before, a cancelled statement on Spark ran on to its answer."""
    with dpsql.connect(spark, metadata=heavy, ledger=":memory:") as con:
        con.execute("SELECT COUNT(*) AS n FROM adult", epsilon=1)  # copies the CSVs first
        stopped = cancelled_while_reading(con, SLOW)
        assert isinstance(stopped, dpsql.QueryCanceledError), stopped
        assert stopped.epsilon_spent == 1 and "cancel" in stopped.message
        assert _idle(spark)


def test_a_statement_over_public_tables_past_the_timeout_is_uncharged(spark, tmp_path):
    """A public statement runs under the connection's timeout and a server's limits: it was
    given only the row limit on Spark."""
    meta = nb.metadata(tmp_path)
    nb.write_database(tmp_path, nb.base_tables())
    pd.DataFrame({"k": range(2000)}).to_csv(tmp_path / "numbers.csv", index=False)
    meta["tables"]["numbers"] = {"public": True, "source": str(tmp_path / "numbers.csv"),
                                 "columns": {"k": "int"}}
    slow = ("SELECT COUNT(*) AS n FROM numbers a JOIN numbers b ON a.k <> b.k "
            "JOIN numbers c ON b.k <> c.k")
    with dpsql.connect(spark, metadata=meta, ledger=":memory:") as con:
        with con._backend.public_limits(1, None):
            with pytest.raises(dpsql.QueryTimeoutError, match="longer than its time limit; "
                               "nothing was charged"):
                con.execute(slow)
        assert con.budget_spent.epsilon == 0 and _idle(spark)


def test_a_job_cancelled_by_the_cluster_is_charged(spark, heavy):
    """A job the cluster cancels (its own limit, an operator) failed with py4j's error, which
    no dpsql.Error wraps: uncharged, with Spark's message, where the data without the person
    who made it long answered."""
    done = threading.Event()

    def operator():
        while not done.wait(0.2):
            spark.sparkContext.cancelAllJobs()

    with dpsql.connect(spark, metadata=heavy, ledger=":memory:") as con:
        con.execute("SELECT COUNT(*) AS n FROM adult", epsilon=1)  # copies the CSVs first
        threading.Thread(target=operator, daemon=True).start()
        try:
            with pytest.raises(dpsql.InternalError, match="charged") as failed:
                con.execute(SLOW, epsilon=1)
        finally:
            done.set()
        assert failed.value.epsilon_spent == 1 and con.budget_spent.epsilon == 2
        assert "SPARK_JOB_CANCELLED" not in str(failed.value)
    assert _idle(spark)


# --- source files replaced after connect -----------------------------------------------------

PEOPLE = {"name": "spark_sources", "budget": {"epsilon": 1e9}, "tables": {"people": {
    "privacy_unit": "pid", "max_groups_per_unit": 1, "max_rows_per_group": 2,
    "columns": {"pid": "int", "score": {"type": "int", "lower": 0, "upper": 100}}}}}
# what D′'s newcomer (pid 1000, 40 rows) stores once the file stores score as text
NEWCOMER = ["n/a", "1e400", "-9223372036854775809", " 5 ", "NaN", "Infinity", None]


def _write(path: Path, frame: pd.DataFrame) -> None:
    """Replace ``path`` at once (a new file under the name, as a refresh does), in row groups
    of 50 rows for Parquet."""
    draft = path.with_name("draft-" + path.name)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), draft,
                       row_group_size=50)
    else:
        frame.to_csv(draft, index=False)
    os.replace(draft, path)


def _people(path: Path) -> dict:
    """PEOPLE read from ``path``."""
    return {**PEOPLE, "tables": {"people": {**PEOPLE["tables"]["people"], "source": str(path)}}}


def _scores(people: int, kind=int, extra: bool = False) -> pd.DataFrame:
    """``people`` persons with 1-3 scores each, as ``kind``; with ``extra`` the newcomer."""
    rows = [(i, kind(i % 50)) for i in range(people) for _ in range(1 + i % 3)]
    rows += [(1000, NEWCOMER[k % len(NEWCOMER)]) for k in range(40)] * extra
    return pd.DataFrame(rows, columns=["pid", "score"])


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_source_grown_after_connect_is_read_whole_and_answered_anew(spark, tmp_path, suffix):
    """The view kept the file's length of connect time: Spark read 101 rows of a CSV grown to
    1,000 and 200-300 of a Parquet file's 3,000 (its row groups that began within the old
    length).
    The answer stored for the old file is not reused for the new one."""
    path = tmp_path / f"people{suffix}"
    _write(path, pd.DataFrame({"pid": range(100), "score": 7}))
    with dpsql.connect(spark, metadata=_people(path), ledger=tmp_path / "l.sqlite") as con:
        count = "SELECT COUNT(*) AS n FROM people"
        first = con.execute(count, epsilon=1e6).fetchone()[0]
        assert first == pytest.approx(100, abs=1)
        assert con.execute(count, epsilon=1e6).fetchone()[0] == first  # reused
        assert con.budget_spent.epsilon == 1e6
        _write(path, pd.DataFrame({"pid": range(3000), "score": 7}))
        source = con._backend.sources["people"]
        assert con._backend.run_sql(f"SELECT COUNT(*) FROM {source}")[1] == [(3000,)]
        assert con.execute(count, epsilon=1e6).fetchone()[0] == pytest.approx(3000, abs=1)
        assert con.budget_spent.epsilon == 2e6


def test_sources_refreshed_after_connect_keep_the_contract(spark, tmp_path):
    """D and D′ connected, then each visits.csv replaced by a refresh with 700 more visits of
    new persons (D′'s adversary still last): D read the refresh's first bytes of D's old
    length and D′ of D′'s, 700 rows more of the new persons, far past COUNT's sensitivity."""
    base = nb.base_tables()
    adversary = nb.adversary(0)
    pair = nb.open_pair(tmp_path, base, nb.with_rows(base, adversary), target=spark)
    try:
        newcomers = nb.adversary(0)["visits"].assign(uid=[str(100 + i % 350)
                                                          for i in range(700)])
        refreshed = nb.with_rows(base, {"visits": newcomers})
        nb.write_database(tmp_path / "d", refreshed)
        nb.write_database(tmp_path / "d_prime", nb.with_rows(refreshed, adversary))
        assert nb.check_statement(pair, "SELECT COUNT(*) AS n FROM visits") == "released"
    finally:
        pair.close()


def _replaced_pair(spark, root: Path, after) -> nb.Pair:
    """D and D′ connected over people.parquet storing score as BIGINT, then each file
    replaced by ``after(extra)`` (D′'s with the newcomer)."""
    connections = []
    for side, extra in (("d", False), ("d_prime", True)):
        path = root / side / "people.parquet"
        path.parent.mkdir()
        _write(path, _scores(60))
        connections.append(dpsql.connect(spark, metadata=_people(path), insecure_seed=11,
                                         ledger=root / f"{side}.sqlite"))
        _write(path, after(extra))
    return nb.Pair(*connections, folders=(root / "d", root / "d_prime"))


def test_a_source_retyped_after_connect_is_converted(spark, tmp_path):
    """A Parquet file replaced by one storing score as text, D′'s newcomer holding 'n/a':
    Spark read it with the schema of connect time and failed with py4j's error on D and D′,
    outside dpsql's errors. The new file's view converts it, as DuckDB's Parquet view does."""
    pair = _replaced_pair(spark, tmp_path, lambda extra: _scores(60, str, extra))
    try:
        assert nb.check_statement(pair, "SELECT AVG(score) AS a FROM people") == "released"
    finally:
        pair.close()


@pytest.mark.parametrize(("after", "refusal"), [
    (lambda extra: _scores(60, int, extra)[["pid"]], "it lacks the declared column 'score'"),
    (lambda extra: _scores(60).assign(score=[{"a": 1}] * 120),
     "it stores score as struct<a:bigint>, which Spark cannot convert to int"),
])
def test_a_source_that_lost_a_declared_column_is_refused_alike(spark, tmp_path, after, refusal):
    """A file replaced by one without score was answered with NULL scores; one storing it as
    a struct failed with py4j's error. Both are refused before any job runs, on D and D′,
    naming the column from the metadata; nothing charged."""
    pair = _replaced_pair(spark, tmp_path, after)
    try:
        assert nb.check_statement(pair, "SELECT AVG(score) AS a FROM people") == "data"
        error = nb.refused_uncharged(pair.d, "SELECT COUNT(*) AS n FROM people", dpsql.DataError)
        assert "its source" in str(error) and refusal in str(error)
    finally:
        pair.close()


class _JavaError(Exception):
    """A failed job as py4j raises it: the Java exception, with its causes, beside it."""

    def __init__(self, java: str) -> None:
        super().__init__("An error occurred while calling o42.collectToPython")
        self.java_exception = java


@pytest.mark.parametrize("java, resource", [
    ("org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 "
     "failed 1 times\nCaused by: java.lang.OutOfMemoryError: Java heap space", "memory"),
    ("org.apache.spark.memory.SparkOutOfMemoryError: Unable to acquire 65536 bytes", "memory"),
    ("org.apache.spark.SparkException: Job aborted\nCaused by: java.io.IOException: No space "
     "left on device", "temporary disk space"),
    ("org.apache.spark.SparkException: Job 7 cancelled because SparkContext was shut down",
     None)])
def test_a_failed_job_says_what_ran_out(java, resource):
    """A job that ran out of memory or disk is reported as that (``resource``, whose hint says
    what to change), not as an engine bug; both are charged as any failure."""
    from dpsql.backends.spark import _exhausted
    assert _exhausted(_JavaError(java)) == resource
