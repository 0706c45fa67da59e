"""The dpsql:// client reports the release each statement made, and none for the statements
the server answers itself: it read SHOW dpsql.last_release after any SELECT, so SELECT 1 on a
fresh connection raised AttributeError, after a release SELECT 1 AS a, 2 AS b came back as
the previous query's one column, a DECLARE charged 0.25 reported 0, and a COPY was run and
charged before psycopg refused to read it."""

from __future__ import annotations

import pytest
from server_harness import serving
from test_psql import spent

import dpsql

ANALYSTS = ["ada", "bo"]
COUNT = "SELECT COUNT(*) AS n FROM visits WHERE amount > {}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    yield from serving(tmp_path_factory.mktemp("dpsql-releases"), analysts=ANALYSTS)


def test_the_servers_own_answers_are_no_release(server):
    with dpsql.connect(server.url("ada")) as con:
        cur = con.execute("SELECT 1")  # a fresh session: no release yet
        assert cur.fetchall() == [(1,)] and cur.epsilon_spent == 0
        assert [(d.name, d.type_code) for d in cur.description] == [("?column?", "BIGINT")]
        released = con.execute("SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
        assert released.epsilon_spent == pytest.approx(0.25) and released.rowcount == 7
        for sql, rows, names in (("SELECT 1 AS a, 2 AS b", [(1, 2)], ["a", "b"]),
                                 ("SELECT 'x' AS t, true AS f", [("x", True)], ["t", "f"]),
                                 ("SELECT 1", [(1,)], ["?column?"])):
            cur = con.execute(sql)
            assert (cur.fetchall(), [d.name for d in cur.description]) == (rows, names)
            assert cur.epsilon_spent == 0 and cur.notes == ()
        cur = con.execute("SELECT version()")
        assert cur.fetchone()[0].startswith("PostgreSQL") and cur.epsilon_spent == 0
        # the next release is told from the last one
        again = con.execute(COUNT.format(1))
        assert again.epsilon_spent == pytest.approx(0.25) and again.notes
    assert spent(server, "ada") == pytest.approx(0.5)


def test_a_declared_cursor_reports_its_charge_and_copy_is_refused_unsent(server):
    with dpsql.connect(server.url("bo")) as con:
        declared = con.execute("DECLARE c CURSOR FOR " + COUNT.format(2))
        assert declared.epsilon_spent == pytest.approx(0.25) == spent(server, "bo")
        assert declared.fetchall() == [] and declared.notes
        fetched = con.execute("FETCH ALL FROM c")
        assert [d.name for d in fetched.description] == ["n", "n_low", "n_high"]
        assert fetched.rowcount == 1 and fetched.epsilon_spent == 0
        with pytest.raises(dpsql.NotSupportedError, match="Nothing was sent or spent") as err:
            con.execute("COPY (" + COUNT.format(3) + ") TO STDOUT")
        assert "to_csv" in err.value.hint
        assert con.execute("SELECT 1").fetchall() == [(1,)]  # the session goes on
    assert spent(server, "bo") == pytest.approx(0.25)
