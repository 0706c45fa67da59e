"""Fixtures of the backend suite (test modules import them by name): a real PostgreSQL server
and a local Spark session, each loaded with the generated adult and visits tables of
tests/conftest.py.

Start the server with ``bash scripts/services.sh`` (it prints the URL); point the tests at
another one with ``DPSQL_TEST_POSTGRES=postgresql://...``. Without a server, pyspark or
Java the tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from conftest import catalogue, make_adult, make_visits

DEFAULT_POSTGRES = "postgresql://dpsql@127.0.0.1:55432/postgres"
L0 = 3  # max_groups_per_unit of the visits table in tests/conftest.py


def require(condition: bool, what: str) -> None:
    """Skip (or fail in CI) when a server the test needs is absent."""
    if condition:
        return
    message = f"{what}; start it with 'bash scripts/services.sh'"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


def visits_within_l0() -> pd.DataFrame:
    """make_visits() keeping each person's rows on their first L0 distinct days.

    No person then has more than L0 groups in any GROUP BY on day, so the keyed-hash L0
    selection (whose hash differs by dialect) keeps every group on every backend.
    """
    visits = make_visits()
    days = visits.drop_duplicates(["uid", "day"]).groupby("uid").head(L0)[["uid", "day"]]
    return visits.merge(days, on=["uid", "day"]).sort_values(["uid", "day"], kind="stable")


DATES = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]


def frames() -> dict[str, pd.DataFrame]:
    """The tables every backend holds (``events``: one row per visit, a DATE key)."""
    visits = make_visits()
    events = pd.DataFrame({"happened": [DATES[r] for r in visits.region_id],
                           "amount": visits.amount})
    return {"adult": make_adult(), "visits": visits, "visits_l0": visits_within_l0(),
            "events": events}


def cancelled_while_reading(con, sql: str):
    """The error ``con.execute(sql, epsilon=1)`` ends with when its client's cancel
    (``backends/cancel.py``, as the server's CancelRequest) comes once it was charged (its
    read began), None when it was answered."""
    import dpsql
    from dpsql.backends import cancel

    request, ended, outcome = cancel.Cancel(), threading.Event(), []

    def run() -> None:
        with cancel.cancellable(request):
            try:
                con.execute(sql, epsilon=1)
            except dpsql.Error as err:
                outcome.append(err)
            finally:
                ended.set()

    before = con.budget_spent.epsilon
    thread = threading.Thread(target=run)
    thread.start()
    while not ended.wait(0.2):
        if con.budget_spent.epsilon > before:
            request.request()
    thread.join()
    return outcome[0] if outcome else None


def metadata(folder: Path, *, warehouse: bool = False, budget: float = 1000.0,
             name: str = "cases") -> dict:
    """The sensitivity-case catalogue plus visits_l0, with CSV sources in ``folder``; with
    ``warehouse`` the tables are declared without source (the backend's own tables)."""
    meta = catalogue(folder, budget=budget)
    meta["name"] = name
    meta["tables"]["visits_l0"] = {**meta["tables"]["visits"],
                                   "source": str(folder / "visits_l0.csv")}
    meta["tables"]["events"] = {
        "source": str(folder / "events.csv"), "privacy_unit": None,
        "columns": {"happened": {"type": "date", "values": DATES},
                    "amount": {"type": "float", "lower": 0, "upper": 100}}}
    if warehouse:
        for table in meta["tables"].values():
            del table["source"]
    return meta


@pytest.fixture(scope="session")
def backend_metadata():
    """The ``metadata`` builder, as a fixture."""
    return metadata


@pytest.fixture(scope="module")
def csv_dir(tmp_path_factory) -> Path:
    """The tables as CSV files, the DuckDB backend's sources."""
    folder = tmp_path_factory.mktemp("tables")
    for name, frame in frames().items():
        frame.to_csv(folder / f"{name}.csv", index=False)
    return folder


# each table is typed as the catalogue declares it, on every backend
SQL_TYPES = {"int": "BIGINT", "float": "DOUBLE PRECISION", "text": "TEXT", "date": "DATE"}


_SPARK_TYPES = {"DOUBLE PRECISION": "DOUBLE", "TEXT": "STRING"}


def _declared(table: str) -> dict[str, str]:
    columns = metadata(Path("."))["tables"][table]["columns"]
    return {name: SQL_TYPES[spec["type"]] for name, spec in columns.items()}


@contextlib.contextmanager
def databases(prefix: str) -> Iterator[Callable[[], str]]:
    """Fresh databases on the test PostgreSQL server: ``create()`` makes one and gives its
    URL; every one is dropped at the end (skips, or fails under CI, without a server)."""
    try:
        import psycopg
    except ImportError:
        require(False, "psycopg is not installed")
    server = os.environ.get("DPSQL_TEST_POSTGRES", DEFAULT_POSTGRES)
    try:
        admin = psycopg.connect(server, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as err:
        require(False, f"no PostgreSQL server at {server} ({err})")
    names: list[str] = []

    def create() -> str:
        names.append(f"{prefix}_{uuid.uuid4().hex[:12]}")
        admin.execute(f"CREATE DATABASE {names[-1]}")
        return server.rsplit("/", 1)[0] + "/" + names[-1]

    with admin:
        try:
            yield create
        finally:
            for name in names:
                admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def copy_table(con, name: str, frame: pd.DataFrame, types: dict[str, str],
               value: Callable[[object, str], object] = lambda v, column: v) -> None:
    """CREATE TABLE ``name`` with each column's SQL type (``types``) and COPY the frame's
    rows in, each cell through ``value(cell, column)``."""
    con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {types[c]}' for c in frame.columns)})")
    with con.cursor().copy(f"COPY {name} FROM STDIN") as copy:
        for row in frame.itertuples(index=False):
            copy.write_row([value(v, c) for c, v in zip(frame.columns, row, strict=True)])


@pytest.fixture(scope="module")
def postgres_url() -> str:
    """URL of a fresh database holding the tables; dropped afterwards."""
    import psycopg

    with databases("dpsql_test") as create:
        url = create()
        with psycopg.connect(url, autocommit=True) as con:
            for table, frame in frames().items():
                copy_table(con, table, frame, _declared(table))
        yield url


@pytest.fixture(scope="module")
def spark():
    """A local Spark session with the tables as temporary views."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        require(False, "pyspark is not installed")
    require(shutil.which("java") is not None, "Java (needed by Spark) is not installed")
    with warnings.catch_warnings():  # pyspark warns about its pandas and JVM versions
        warnings.simplefilter("ignore")
        session = (SparkSession.builder.master("local[2]").appName("dpsql-tests")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", "1")
                   .config("spark.sql.execution.arrow.pyspark.enabled", "true")
                   .config("spark.driver.memory", "1g")
                   .getOrCreate())
        session.sparkContext.setLogLevel("ERROR")
        for table, frame in frames().items():
            # cached in the JVM: queries then start no Python workers
            typed = [f"CAST({c} AS {_SPARK_TYPES.get(t, t)}) AS {c}"
                     for c, t in _declared(table).items()]
            session.createDataFrame(frame).selectExpr(*typed).cache() \
                .createOrReplaceTempView(table)
            session.table(table).count()
    yield session
    session.stop()
