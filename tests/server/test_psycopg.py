"""psycopg 3 and pandas.read_sql (through psycopg) against the server, unchanged."""

from __future__ import annotations

import json

import pandas as pd
import psycopg
import pytest
from server_harness import server  # noqa: F401 - the fixture


def test_psycopg_query_params_and_intervals(server):
    with psycopg.connect(server.dsn("bob")) as con:  # not autocommit: BEGIN is accepted
        cur = con.execute("SELECT member, SUM(amount) AS s FROM visits WHERE region_id = %s "
                          "GROUP BY member", [2])
        assert [d.name for d in cur.description] == ["member", "s", "s_low", "s_high"]
        rows = cur.fetchall()
        assert {r[0] for r in rows} == {True, False}
        assert all(low <= s <= high for _, s, low, high in rows)
        release = cur.connection.execute("SHOW dpsql.last_release").fetchone()[0]
        assert '"epsilon_spent": 0.25' in release


def test_psycopg_set_epsilon_budget_and_refusal(server):
    with psycopg.connect(server.dsn("bob"), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 0.5")
        n = con.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 1").fetchone()
        assert len(n) == 3
        with pytest.raises(psycopg.Error) as info:
            con.execute("SELECT COUNT(*) AS n FROM visits WHERE region_id = 3")
        assert info.value.sqlstate == "53400"
        assert "nothing was run or released" in info.value.diag.message_primary
        assert info.value.diag.message_hint
        budget = json.loads(con.execute("SHOW dpsql.budget").fetchone()[0])
        assert budget["visits"]["remaining"]["epsilon"] == 0.25


def test_psycopg_errors_have_sqlstates(server):
    with psycopg.connect(server.dsn("carol"), autocommit=True) as con:
        for sql, state in [("SELECT COUNT(*) FROM nowhere", "42P01"),
                           ("SELECT COUNT(*) FROM visits WHERE nope = 1", "42703"),
                           ("SELEC 1", "42601"),
                           ("DELETE FROM visits", "0A000")]:
            with pytest.raises(psycopg.Error) as info:
                con.execute(sql)
            assert info.value.sqlstate == state, (sql, info.value)
        with pytest.raises(psycopg.Error) as info:
            con.execute("SET dpsql.epsilon = 5")
            con.execute("SELECT COUNT(*) FROM visits")
        assert info.value.sqlstate == "53400"  # above the per-query cap


@pytest.mark.filterwarnings("ignore:pandas only supports SQLAlchemy")
def test_pandas_read_sql_through_psycopg(server):
    with psycopg.connect(server.dsn("carol")) as con:
        frame = pd.read_sql("SELECT day, COUNT(*) AS n FROM visits WHERE amount > 2 GROUP BY day",
                            con)
    assert list(frame.columns) == ["day", "n", "n_low", "n_high"]
    assert len(frame) == 7
    assert (frame.n_low <= frame.n).all() and (frame.n <= frame.n_high).all()
    with psycopg.connect(server.dsn("carol"), autocommit=True) as con:
        con.execute("SET dpsql.epsilon = 0.9")
        with pytest.raises(Exception, match="cannot cover this request") as info:
            pd.read_sql("SELECT COUNT(*) AS n FROM visits WHERE amount > 3", con)
        assert "53400" in repr(info.value.__cause__ or info.value) or \
            getattr(info.value, "sqlstate", "53400") == "53400"
        budget = json.loads(con.execute("SHOW dpsql.budget").fetchone()[0])
        assert budget["visits"]["spent"]["epsilon"] == 0.25  # only the frame above was charged


def test_psycopg_wrong_password(server):
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(server.dsn("carol", "guess"))
    assert "password authentication failed" in str(info.value)


def test_unknown_dataset_is_refused(server):
    with pytest.raises(psycopg.OperationalError) as info:
        psycopg.connect(server.dsn("carol", dataset="payroll"))
    assert "no dataset" in str(info.value)


def test_psycopg_session_commands_are_accepted(server):
    """What psycopg sends by itself: DEALLOCATE ALL on rollback after executemany,
    SAVEPOINT/RELEASE/ROLLBACK TO for nested transactions, DISCARD ALL, SET TIME ZONE."""
    with psycopg.connect(server.dsn("ned")) as con:
        con.cursor().executemany("SELECT COUNT(*) AS n FROM visits WHERE region_id = %s", [[1]])
        con.rollback()
        with con.transaction(), con.transaction():
            con.execute("SET TIME ZONE 'UTC'")
        with pytest.raises(psycopg.Error), con.transaction():
            with con.transaction():
                con.execute("SELECT uid FROM visits")
        con.execute("SET dpsql.epsilon = 0.2")
        con.execute("SET dpsql.epsilon TO DEFAULT")
        assert con.execute("SHOW dpsql.epsilon").fetchone() == ("default",)
        for sql in ("DEALLOCATE PREPARE x", "DEALLOCATE ALL", "DISCARD ALL"):
            con.execute(sql)
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            con.execute("SET dpsql.epsilom = 0.2")  # misspelt: not silently the default


def test_psycopg_comments_after_a_statement_and_aborted_transactions(server):
    with psycopg.connect(server.dsn("ned"), autocommit=True) as con:
        cur = con.execute("SELECT COUNT(*) AS n FROM visits WHERE day = 'Sat'; -- done")
        assert len(cur.fetchall()) == 1
        assert con.execute("-- nothing").statusmessage is None  # EmptyQueryResponse
        con.execute("BEGIN")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            con.execute("SELECT uid FROM visits")
        with pytest.raises(psycopg.errors.InFailedSqlTransaction):
            con.execute("SHOW dpsql.epsilon")
        con.execute("ROLLBACK")


def test_session_epsilon_is_capped_at_set_and_is_a_default(server):
    with psycopg.connect(server.dsn("rita"), autocommit=True) as con:
        with pytest.raises(psycopg.Error) as info:  # the cap is 1: it was accepted here
            con.execute("SET dpsql.epsilon = 5")
        assert info.value.sqlstate == "53400"
        assert "dpsql code: epsilon_limit" in info.value.diag.message_detail
        assert con.execute("SHOW dpsql.epsilon").fetchone()[0] == "default"
        con.execute("SET dpsql.epsilon = 0.2")
        # the statement's own ε wins over the session's default (it was refused as 0.3 ≠ 0.2)
        con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.3) COUNT(*) AS n "
                    "FROM visits WHERE region_id = 4")
        release = json.loads(con.execute("SHOW dpsql.last_release").fetchone()[0])
        assert release["epsilon_spent"] == pytest.approx(0.3)
        with pytest.raises(psycopg.Error) as info:  # and is checked against the cap
            con.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=2) COUNT(*) AS n "
                        "FROM visits WHERE region_id = 3")
        assert "dpsql code: epsilon_limit" in info.value.diag.message_detail
        budget = json.loads(con.execute("SHOW dpsql.budget").fetchone()[0])
        assert budget["visits"]["spent"]["epsilon"] == pytest.approx(0.3)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_sqlalchemy_postgresql_psycopg_dialect_connects_and_reads(server):
    # the stock dialect's first statement, select pg_catalog.version(), was refused ("the
    # SELECT has no FROM clause"), then pandas' has_table query aborted the transaction
    import sqlalchemy as sa

    url = server.url("uma").replace("dpsql://", "postgresql+psycopg://")
    engine = sa.create_engine(url, pool_pre_ping=True)
    frame = pd.read_sql("SELECT day, COUNT(*) AS n FROM visits GROUP BY day", engine)
    assert list(frame.columns) == ["day", "n", "n_low", "n_high"] and len(frame) == 7
    with engine.connect() as con:  # a second checkout: the pool's pre-ping (SELECT 1)
        assert con.execute(sa.text("SELECT 1")).scalar() == 1
        assert con.execute(sa.text("SELECT current_schema()")).scalar() == "public"
    inspector = sa.inspect(engine)
    assert inspector.has_table("visits") and not inspector.has_table("payroll")
    engine.dispose()
    with psycopg.connect(server.dsn("uma"), autocommit=True) as con:
        budget = json.loads(con.execute("SHOW dpsql.budget").fetchone()[0])
    assert budget["visits"]["spent"]["epsilon"] == pytest.approx(0.25)  # one release


def test_psycopg_named_cursor_is_one_release_fetched_in_pieces(server):
    # DECLARE "name" CURSOR FOR ... was a syntax error
    with psycopg.connect(server.dsn("walt")) as con:
        with con.cursor("pages") as cur:
            cur.execute("SELECT day, COUNT(*) AS n FROM visits WHERE region_id = %s "
                        "GROUP BY day", [1])
            assert [d.name for d in cur.description] == ["day", "n", "n_low", "n_high"]
            first, rest = cur.fetchmany(2), cur.fetchall()
            assert len(first) == 2 and len(rest) == 5 and cur.fetchone() is None
        with pytest.raises(psycopg.Error) as info:
            con.execute('FETCH FORWARD 1 FROM "pages"')  # closed with the cursor
        assert "does not exist" in info.value.diag.message_primary
    with psycopg.connect(server.dsn("walt"), autocommit=True) as con:
        budget = json.loads(con.execute("SHOW dpsql.budget").fetchone()[0])
    assert budget["visits"]["spent"]["epsilon"] == pytest.approx(0.25)  # one DECLARE


def test_a_session_holds_few_cursors_and_a_transaction_end_closes_them(server):
    """Cursors hold their rows and a stored answer is declared again for free: a session
    could hold any number of them, past COMMIT, which PostgreSQL's own cursors do not
    outlive."""
    sql = "SELECT day, COUNT(*) AS n FROM visits GROUP BY day"
    with psycopg.connect(server.dsn("xavier")) as con:
        for i in range(16):
            con.execute(f"DECLARE c{i} CURSOR FOR {sql}")
        with pytest.raises(psycopg.Error) as info:
            con.execute(f"DECLARE c16 CURSOR FOR {sql}")
        assert "at most 16 open cursors" in info.value.diag.message_primary
        con.rollback()
        con.execute(f"DECLARE c16 CURSOR FOR {sql}")
        assert len(con.execute("FETCH ALL FROM c16").fetchall()) == 7
        con.commit()
        with pytest.raises(psycopg.Error) as info:
            con.execute("FETCH ALL FROM c16")
        assert "does not exist" in info.value.diag.message_primary


def test_dollar_placeholders_are_found_as_postgresql_reads_them(server):
    """A $1 inside a nested comment was taken for a placeholder (the text's own lexer knew
    no nested comments, dollar-quoted or E'' strings), so each value bound one place off."""
    with psycopg.connect(server.dsn("xavier"), autocommit=True) as con:
        cur = con.cursor()
        cur.execute("SELECT COUNT(*) AS n FROM visits WHERE /* a /* b */ $1 */ day = %s "
                    "AND region_id = %s", ["Mon", 1], prepare=True)
        same = con.execute("SELECT COUNT(*) AS n FROM visits WHERE day = 'Mon' AND "
                           "region_id = 1").fetchall()
        assert cur.fetchall() == same  # the stored answer: the same statement
