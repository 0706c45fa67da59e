"""A stored answer given again is said to be reused whatever its columns: one of quantiles
only (MEDIAN, MIN, MAX), which has no interval columns, was reported as a new release
(``reused: false`` over HTTP, psql's notice without "answer reused", the log's outcome ok)."""

from __future__ import annotations

import httpx
import psycopg
import pytest
from server_harness import password, serving

MEDIAN = "SELECT MEDIAN(amount) AS md FROM visits"
MAXIMUM = "SELECT MAX(amount) AS mx FROM visits"  # a stored answer is any analyst's


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-reused"), analysts=["alice", "bob"])


def test_a_quantile_answer_given_again_over_http_says_it_is_reused(server):
    with httpx.Client(auth=("alice", password("alice")), timeout=60) as client:
        bodies = [client.post(f"{server.http}/api/v1/datasets/visits/query",
                              json={"sql": MEDIAN, "epsilon": 0.1}).json() for _ in range(2)]
    assert [(b["epsilon_spent"], b["reused"]) for b in bodies] == [(0.1, False), (0, True)]
    assert bodies[0]["rows"] == bodies[1]["rows"]
    lines = [line for line in server.log.read_text().splitlines()
             if "query analyst=alice" in line]
    assert ["outcome=reused" in line for line in lines] == [False, True]


def test_a_quantile_answer_given_again_over_pgwire_says_it_is_reused(server):
    with psycopg.connect(server.dsn("bob"), autocommit=True) as con:
        notices: list[str] = []
        con.add_notice_handler(lambda notice: notices.append(notice.message_primary))
        con.execute("SET dpsql.epsilon = 0.1")
        first = con.execute(MAXIMUM).fetchall()
        again = con.execute(MAXIMUM).fetchall()
        release = con.execute("SHOW dpsql.last_release").fetchone()[0]
    assert first == again
    dpsql_notices = [text for text in notices if text.startswith("dpsql:")]
    assert ["answer reused" in text for text in dpsql_notices] == [False, True]
    assert '"reused": true' in release
