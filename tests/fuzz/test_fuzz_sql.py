"""Grammar-based fuzzing: every statement is answered with noise or refused, never worse.

For each generated statement or script: a dpsql.Error (other than InternalError) and an
unchanged ledger (or, for a failure on the data, which the engine charges like an answer,
exactly one row charging the ε asked for), or a release whose every cell is noisy, derived from
noisy cells, or a key of a public domain (the catalogue's, or a literal of the statement), with
exactly one ledger row charging exactly the ε asked for.
Anything else (an uncaught exception, a raw value, a spend without a release) fails.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import pytest
import sqlglot
from conftest import DAYS, EDUCATION, catalogue, make_adult, make_visits
from hypothesis import HealthCheck, given, settings
from sqlglot import exp
from sql_grammar import KEY_LITERALS, sql_text

import dpsql

CI_EXAMPLES, SLOW_EXAMPLES, SNAPSHOT_EXAMPLES = 2000, 20000, 500
EPSILON = Fraction(1, 2)
# values a key column may show: the public domains of the catalogue and the grammar's CASEs
# (int keys with bounds have the public domain lower..upper, e.g. hours + age: 18..189)
PUBLIC_VALUES = {*EDUCATION, *DAYS, "Female", "Male", "<=50K", ">50K", *range(200),
                 *KEY_LITERALS, True, False}


OUTCOMES: Counter = Counter()  # outcome of every fuzzed statement, for the coverage check


def _connect(tmp_path_factory, bounding: str) -> dpsql.Connection:
    folder = tmp_path_factory.mktemp("fuzz")
    make_adult(400).to_csv(folder / "adult.csv", index=False)
    make_visits(60).to_csv(folder / "visits.csv", index=False)
    return dpsql.connect(metadata=catalogue(folder, budget=1e9),
                         ledger=folder / "ledger.sqlite", insecure_seed=3, bounding=bounding)


@pytest.fixture(scope="module")
def fuzz_connection(tmp_path_factory):
    con = _connect(tmp_path_factory, "per_query")
    yield con
    con.close()


@pytest.fixture(scope="module")
def snapshot_connection(tmp_path_factory):
    con = _connect(tmp_path_factory, "snapshot")
    yield con
    con.close()


def check_one(con: dpsql.Connection, sql: str, script: bool) -> str:
    """Run one statement and check the contract; return 'released' or the error code."""
    before = con.ledger.history()
    cursor = con.cursor()
    try:
        if script:
            cursor.executescript(sql, epsilon=EPSILON)
        else:
            cursor.execute(sql, epsilon=EPSILON)
    except dpsql.InternalError:
        raise
    except dpsql.Error as err:
        charged = con.ledger.history()[len(before):]
        if isinstance(err, dpsql.BackendError) and "was charged" in err.message:
            # a failure on the data depends on the data, so it is charged like an answer
            assert len(charged) == 1 and Fraction(charged[0]["epsilon"]) == EPSILON, sql
            assert err.epsilon_spent == EPSILON, sql
            return "failed_charged"
        assert not charged and err.epsilon_spent == 0, f"refused ({err.code}) but charged: {sql!r}"
        return err.code
    after = con.ledger.history()
    charged = after[len(before):]
    if cursor.epsilon_spent == 0:  # only public statements: nothing may be charged
        assert not charged, sql
        return "public"
    assert len(charged) == 1 and Fraction(charged[0]["epsilon"]) == EPSILON, (sql, charged)
    _check_cells(cursor, sql)
    return "released"


def _check_cells(cursor: dpsql.Cursor, sql: str) -> None:
    # the statement's own literals are public too (a mutated CASE can name a new key value)
    own = {literal.this for tree in sqlglot.parse(sql, read="duckdb") if tree is not None
           for literal in tree.find_all(exp.Literal) if literal.is_string}
    while True:
        rows = cursor.fetchall()
        for index, column in enumerate(cursor.description):
            values = [row[index] for row in rows]
            if column.noise is not None:  # a mechanism's output or derived from one
                assert all(v is None or isinstance(v, (int, float)) for v in values), sql
                continue
            raw = [v for v in values if v is not None and not _public(v) and v not in own]
            assert not raw, f"column {column.name!r} shows non-public values {raw[:3]}: {sql!r}"
        if not cursor.nextset():
            return


def _public(value) -> bool:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    return value in PUBLIC_VALUES or value == 42  # the grammar's literal output "42 AS answer"


@settings(max_examples=CI_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(statement=sql_text())
def test_fuzz_statements(fuzz_connection, statement):
    OUTCOMES[check_one(fuzz_connection, *statement)] += 1


@settings(max_examples=SNAPSHOT_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(statement=sql_text())
def test_fuzz_statements_with_snapshots(snapshot_connection, statement):
    """The same contract when persons are bounded once per connection (bounding="snapshot")."""
    check_one(snapshot_connection, *statement)


@pytest.mark.slow
@settings(max_examples=SLOW_EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(statement=sql_text())
def test_fuzz_statements_long(fuzz_connection, statement):
    OUTCOMES[check_one(fuzz_connection, *statement)] += 1


def test_fuzz_reached_every_stage():
    """The grammar is useful only if it reaches releases and every kind of refusal."""
    if not OUTCOMES:
        pytest.skip("run together with the fuzz tests above")
    print("fuzz outcomes:", dict(OUTCOMES.most_common()))
    total = sum(OUTCOMES.values())
    assert OUTCOMES["released"] > total / 20
    for code in ("syntax", "unknown_table", "unknown_column", "non_aggregate", "private_keys",
                 "missing_bounds", "unsupported_sql"):
        assert OUTCOMES[code] > 0, code
