"""What a server's analyst is told to change is what their client can do: a statement with no
ε names SET dpsql.epsilon, the dpsql:// client's epsilon= and HTTP's "epsilon" (it named the
embedded execute()/connect() keywords, which no server client has), and the dpsql:// client
sees the per-query cap's refusal under the code psql and HTTP clients see (epsilon_limit, it
said budget_exhausted)."""

from __future__ import annotations

import httpx
import pytest
from server_harness import password, serving, write_config
from test_psql import psql

import dpsql

COUNT = "SELECT COUNT(*) AS n FROM visits"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("dpsql-hints")
    yield from serving(home, write_config(home, analysts=["ada"], per_query=None))


def test_no_epsilon_names_the_ways_a_server_client_gives_one(server):
    out = psql(server, "ada", COUNT)
    assert out.returncode != 0 and "no ε was given" in out.stderr
    assert "SET dpsql.epsilon" in out.stderr and "connect()" not in out.stderr
    with httpx.Client(base_url=server.http, auth=("ada", password("ada")), timeout=30) as http:
        response = http.post("/api/v1/datasets/visits/query", json={"sql": COUNT})
    assert '"epsilon": 1 in an HTTP request' in response.json()["hint"]
    with dpsql.connect(server.url("ada")) as con:
        with pytest.raises(dpsql.ProgrammingError) as info:
            con.execute(COUNT)
        assert "execute(..., epsilon=1)" in info.value.hint
        assert con.budget_remaining.epsilon == 1  # nothing spent on any of them


def test_the_per_query_cap_has_the_same_code_on_every_client(server):
    with dpsql.connect(server.url("ada")) as con:
        with pytest.raises(dpsql.BudgetExhaustedError) as info:
            con.execute(COUNT, epsilon=5)
    assert info.value.code == "epsilon_limit" == info.value.server_code
    assert "epsilon=" in info.value.hint
