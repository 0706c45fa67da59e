"""Every refusal of issue 2: the right error class, a message, and nothing spent."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dpsql
from dpsql.errors import lookup

FIXTURE = Path(__file__).parents[1] / "fixtures" / "refusals.sql"


def _cases():
    text = FIXTURE.read_text()
    return re.findall(r"-- expect: (\w+)\n(.+?);\n", text)


@pytest.mark.parametrize("code,sql", _cases(), ids=[c[1][:40] for c in _cases()])
def test_refused_with_code_and_nothing_spent(connect, code, sql):
    con = connect()
    before = con.ledger.history()
    with pytest.raises(dpsql.Error) as info:
        con.cursor().execute(sql, epsilon=1.0)
    assert isinstance(info.value, lookup(code)), f"{type(info.value).__name__}: {info.value}"
    assert info.value.epsilon_spent == 0
    assert str(info.value)  # a message for people
    assert con.ledger.history() == before
    assert con.budget_spent.epsilon == 0


@pytest.mark.parametrize("table", ["adult", "visits"])
def test_count_distinct_of_an_untyped_null_says_what_to_count(connect, table):
    """COUNT(DISTINCT x) is answered for a typed x; NULL has no values to count."""
    with pytest.raises(dpsql.ProgrammingError) as info:
        connect().cursor().execute(f"SELECT COUNT(DISTINCT NULL) FROM {table}", epsilon=1)
    assert "without a type" in str(info.value) and "COUNT(DISTINCT product)" in info.value.hint
    assert info.value.epsilon_spent == 0


def test_syntax_error_reports_position(connect):
    with pytest.raises(dpsql.SQLSyntaxError) as info:
        connect().cursor().execute("SELECT COUNT(*) FROM adult WHERE age >", epsilon=1)
    assert info.value.position is not None
    assert "line 1" in str(info.value) and "^" in str(info.value)


def test_several_statements_where_one_is_expected(connect):
    with pytest.raises(dpsql.ProgrammingError, match="expected one statement"):
        connect().cursor().execute("SELECT COUNT(*) FROM adult; SELECT COUNT(*) FROM adult",
                                   epsilon=1)


@pytest.mark.parametrize("epsilon", [0, -1, float("nan"), float("inf"), "abc"])
def test_bad_epsilon(connect, epsilon):
    con = connect()
    with pytest.raises(dpsql.PrivacyParameterError):
        con.cursor().execute("SELECT COUNT(*) FROM adult", epsilon=epsilon)
    assert con.budget_spent.epsilon == 0


def test_missing_epsilon_is_refused(connect):
    with pytest.raises(dpsql.PrivacyParameterError, match="no ε"):
        connect().cursor().execute("SELECT COUNT(*) FROM adult")


def test_script_with_one_bad_statement_spends_nothing(connect):
    con = connect()
    with pytest.raises(dpsql.UnknownColumnError):
        con.cursor().executescript("SELECT COUNT(*) FROM adult; SELECT SUM(nope) FROM adult",
                                   epsilon=1)
    assert con.ledger.history() == []


def test_parameters_are_bound_as_literals(connect):
    con = connect(budget=1e6)
    row = con.cursor().execute("SELECT COUNT(*) AS n FROM adult WHERE sex = ? AND age > ?",
                               ["Male", 200], epsilon=1000).fetchone()
    assert abs(row[0]) <= 1  # no adult is older than 200; noise at ε=1000 is tiny
    with pytest.raises(dpsql.ProgrammingError, match="placeholder"):
        con.cursor().execute("SELECT COUNT(*) FROM adult WHERE sex = ?", [], epsilon=1)
    # an injection attempt stays a string literal
    row = con.cursor().execute("SELECT COUNT(*) FROM adult WHERE sex = ?",
                               ["x' OR '1'='1"], epsilon=1000).fetchone()
    assert abs(row[0]) <= 1


@pytest.mark.parametrize("sql,named", [
    ("SELECT COUNT(*) FROM adult USING SAMPLE 10%", "sample (TABLESAMPLE SYSTEM (10))"),
    ("SELECT COUNT(*) AS n FROM adult FOR UPDATE", "locks (FOR UPDATE)"),
    ("SELECT COUNT(*) AS n INTO stolen FROM adult", "into (INTO stolen)"),
])
def test_a_clause_the_compiler_does_not_read_is_named(connect, sql, named):
    """Refused by name rather than dropped: DuckDB would answer USING SAMPLE on a sample."""
    with pytest.raises(dpsql.UnsupportedSQLError, match=re.escape(f"does not read its {named}")):
        connect().cursor().execute(sql, epsilon=1.0)
