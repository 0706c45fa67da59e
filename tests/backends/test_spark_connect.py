"""dpsql on a Spark Connect server (``sc://host:port``), the way a cluster or Databricks
Connect is reached: a real server process (pyspark's SparkConnectServer, local[1]) on the
loopback address, the exact plans run there and answer as they do on DuckDB."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import warnings
from pathlib import Path

import pytest
from servers import backend_metadata, csv_dir, require  # noqa: F401 (fixtures)
from test_spark_timeout_and_sources import SLOW, heavy  # noqa: F401 (fixture)

import dpsql

pytestmark = [pytest.mark.spark]

STATEMENTS = [
    "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex",
    "SELECT education, AVG(age) AS a FROM adult GROUP BY education",
    "SELECT day, COUNT(*) AS n, SUM(amount) AS s FROM visits_l0 GROUP BY day",
    "SELECT COUNT(DISTINCT uid) AS people FROM visits",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """sc://127.0.0.1:PORT of a Spark Connect server started for these tests."""
    try:
        import pyspark
        with warnings.catch_warnings():  # pyspark's pandas-version warnings
            warnings.simplefilter("ignore")
            import pyspark.sql.connect  # noqa: F401 - checks grpcio and the rest on import
    except ImportError as err:
        require(False, f"pyspark's Spark Connect client is not installed ({err})")
    require(shutil.which("java") is not None, "Java (needed by Spark) is not installed")
    home = Path(pyspark.__file__).parent
    port = _free_port()
    log = tmp_path_factory.mktemp("spark-connect") / "server.log"
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        server = subprocess.Popen(
            [str(home / "bin" / "spark-submit"), "--class",
             "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[1]",
             "--driver-memory", "1g", "--conf", "spark.ui.enabled=false",
             "--conf", "spark.sql.shuffle.partitions=1",
             "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", f"spark.connect.grpc.binding.port={port}", "spark-internal"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "SPARK_HOME": str(home)})
    connect_mode = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    try:
        deadline = time.monotonic() + 180
        while "Spark Connect server started" not in log.read_text():
            if server.poll() is not None or time.monotonic() > deadline:
                require(False, f"the Spark Connect server did not start: "
                        f"{log.read_text()[-500:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)
        # pyspark marks the whole process as a Spark Connect client once a remote session is
        # made, and a later local session is then refused (CONNECT_URL_NOT_SET): the modules
        # after this one start their own
        if connect_mode is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


def test_exact_plans_on_spark_connect_answer_like_duckdb(connect_url, backend_metadata,
                                                        csv_dir):
    meta = backend_metadata(csv_dir)  # tables from CSV files the server can read
    with warnings.catch_warnings():  # pyspark's pandas-version warnings
        warnings.simplefilter("ignore")
        remote = dpsql.connect(connect_url, metadata=meta, ledger=":memory:", insecure_seed=3)
    local = dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=3)
    with remote, local:
        assert type(remote._backend.session).__module__.startswith("pyspark.sql.connect")
        for sql in STATEMENTS:
            rows = {}
            for name, con in (("connect", remote), ("duckdb", local)):
                query = con._engine.plan(sql, epsilon=1).release.statements[0].exact_query
                rows[name] = con._backend.run_sql(query.sql)
            assert rows["connect"] == rows["duckdb"], sql
        answers = [[con.execute(sql, epsilon=1).fetchall() for sql in STATEMENTS]
                   for con in (remote, local)]
    assert answers[0] == answers[1]


def test_a_query_past_the_timeout_is_interrupted_on_spark_connect(connect_url, heavy):
    """On Spark Connect the query's requests carry a tag of their own, which interruptTag
    interrupts at the deadline: a QueryTimeoutError, charged as on the other backends, and
    the session's next query runs."""
    with warnings.catch_warnings():  # pyspark's pandas-version warnings
        warnings.simplefilter("ignore")
        con = dpsql.connect(connect_url, metadata=heavy, ledger=":memory:", timeout=2)
    with con:
        started = time.monotonic()
        with pytest.raises(dpsql.QueryTimeoutError, match="longer than the timeout of 2 s") \
                as stopped:
            con.execute(SLOW, epsilon=1)
        assert time.monotonic() - started < 60 and stopped.value.epsilon_spent == 1
        assert con._backend.session.getTags() == set()
        assert con._backend.run_sql("SELECT COUNT(*) FROM range(10)", 600)[1] == [(10,)]
