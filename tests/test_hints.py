"""Refusals that say what is refused and what to write instead, and spellings that mean a
statement dpsql answers (APPROX_QUANTILE, a dollar-quoted string, an upper clamp of a count),
and spellings of one statistic that are one aggregate (COVAR_POP(y, x) beside COVAR_POP(x, y)).
"""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import make_visits

import dpsql
from dpsql.compile import compile_statement
from dpsql.parse import parse_one

PER_PERSON = "(SELECT uid, COUNT(*) AS c FROM visits GROUP BY uid) t"


def refusal(con: dpsql.Connection, sql: str, kind: type[dpsql.Error]) -> dpsql.Error:
    with pytest.raises(kind) as caught:
        con.cursor().execute(sql, epsilon=1)
    assert caught.value.epsilon_spent == 0
    return caught.value


def test_a_key_computed_from_the_unit_is_refused_as_such(connect):
    """uid // 10 has many persons a group: the refusal names the key computed from the unit
    (it said 'every group is one person') and its hint is a statement dpsql answers."""
    con = connect(budget=1e15)
    err = refusal(con, "SELECT uid // 10 AS b, COUNT(*) FROM visits GROUP BY b",
                  dpsql.PrivateGroupKeysError)
    assert "computed from the privacy unit (uid)" in str(err)
    assert "every group is one person" not in str(err)
    assert "LEAST(GREATEST(uid // 10, 0), 99)" in err.hint
    rows = con.cursor().execute("SELECT LEAST(GREATEST(uid // 10, 0), 99) AS b, COUNT(*) AS n "
                                "FROM visits GROUP BY b", epsilon=1).fetchall()
    assert len(rows) == 100


def test_a_text_key_of_the_unit_gets_no_numeric_range(connect):
    err = refusal(connect(budget=1e15), "SELECT CAST(uid AS TEXT) AS b, COUNT(*) FROM visits GROUP BY b",
                  dpsql.PrivateGroupKeysError)
    assert "LEAST" not in err.hint and "public attribute" in err.hint


def test_a_remainder_of_the_unit_is_a_public_key(connect):
    """uid % 5 lies in [-4, 4] whatever uid: 9 public keys, where it was refused as a key
    that names persons."""
    rows = connect(budget=1e15).cursor().execute("SELECT uid % 5 AS b, COUNT(*) AS n FROM visits "
                                      "GROUP BY b", epsilon=1e9).fetchall()
    kept = make_visits().groupby("uid").size().clip(upper=2)  # L∞ = 2 rows a group
    truth = kept.groupby(kept.index % 5).sum().to_dict()
    assert [b for b, _ in rows] == list(range(-4, 5))
    assert {b: n for b, n in rows if n} == truth


def aggregate(con: dpsql.Connection, sql: str):
    return compile_statement(parse_one(sql), con.catalog).aggregates[0]


def test_approx_quantile_is_the_quantile(connect):
    """APPROX_QUANTILE(age, 0.25) was refused as 'dpsql does not read its quantile'; it asks
    for the statistic QUANTILE_CONT(age, 0.25) releases, and is answered as it."""
    con = connect(budget=1e15)
    approx = aggregate(con, "SELECT APPROX_QUANTILE(age, 0.25) FROM adult")
    exact = aggregate(con, "SELECT QUANTILE_CONT(age, 0.25) FROM adult")
    assert (approx.kind, approx.quantile, approx.arg) == (exact.kind, exact.quantile, exact.arg)
    value = con.cursor().execute("SELECT APPROX_QUANTILE(age, 0.25) AS q FROM adult",
                                 epsilon=5).fetchone()[0]
    assert 17 <= value <= 90
    refusal(con, "SELECT APPROX_QUANTILE(age, 0.25, 100) FROM adult", dpsql.UnsupportedSQLError)


def test_mode_points_to_the_largest_count(connect):
    err = refusal(connect(budget=1e15), "SELECT MODE(education) FROM adult", dpsql.UnsupportedSQLError)
    assert "GROUP BY education ORDER BY n DESC LIMIT 1" in err.hint


@pytest.mark.parametrize("quoted", ["$$30$$", "$tag$30$tag$"])
def test_a_dollar_quoted_string_is_a_string(connect, quoted):
    """PostgreSQL's dollar quoting: it was refused with "'30' is not supported" and the list
    of functions, where '30' was answered."""
    con = connect(budget=1e15)
    where = compile_statement(parse_one(f"SELECT COUNT(*) FROM adult WHERE age > {quoted}"),
                              con.catalog).where
    assert where == compile_statement(parse_one("SELECT COUNT(*) FROM adult WHERE age > '30'"),
                                      con.catalog).where
    bachelors = quoted.replace("30", "Bachelors")
    count = con.cursor().execute(f"SELECT COUNT(*) FROM adult WHERE education = {bachelors}",
                                 epsilon=1e9).fetchone()[0]
    adult = pd.read_csv(con.catalog.table("adult").source)
    assert count == (adult.education == "Bachelors").sum()


def test_an_upper_clamp_bounds_a_count_of_a_persons_rows(connect):
    """A COUNT of a person's rows is never negative, so LEAST(c, 5) lies in [0, 5]: it was
    refused as 'needs bounds on c' though the analyst clamped it."""
    con = connect(budget=1e15)
    visits = make_visits()
    per_person = visits.groupby("uid").size().clip(upper=5)
    cursor = con.cursor()
    cursor.execute(f"SELECT AVG(LEAST(c, 5)) AS a, SUM(LEAST(c, 5)) AS s FROM {PER_PERSON}",
                   epsilon=1e9)
    average, total = cursor.fetchone()
    assert average == pytest.approx(per_person.mean(), abs=1e-6)
    assert total == per_person.sum()
    checked = compile_statement(parse_one(f"SELECT SUM(LEAST(c, 5)) FROM {PER_PERSON}"),
                                con.catalog)
    assert (checked.aggregates[0].lower, checked.aggregates[0].upper) == (0, 5)


def test_an_unclamped_count_says_an_upper_bound_is_enough(connect):
    err = refusal(connect(budget=1e15), f"SELECT AVG(c) FROM {PER_PERSON}", dpsql.MissingBoundsError)
    assert "LEAST(c, 100)" in err.hint


@pytest.mark.parametrize(("first", "second"), [
    ("COVAR_POP(age, hours)", "COVAR_POP(hours, age)"),
    ("CORR(age, hours)", "CORR(hours, age)"),
    ("COVAR_SAMP(hours, age)", "COVAR_SAMP(age, hours)"),
])
def test_a_covariance_of_swapped_inputs_is_one_aggregate(connect, first, second):
    """Covariance and correlation are symmetric: COVAR_POP(hours, age) beside
    COVAR_POP(age, hours) measured a second product sum and count (6 noised parts, not 4),
    and the two released different values."""
    con = connect(budget=1e15)
    sql = f"SELECT {first} AS a, {second} AS b FROM adult"
    alone = con.explain(f"SELECT {first} AS a FROM adult", epsilon=1)["statements"][0]
    both = con.explain(sql, epsilon=1)["statements"][0]
    assert len(both["aggregates"]) == len(alone["aggregates"])
    a, b = con.cursor().execute(sql, epsilon=1).fetchone()
    assert a == b


def test_swapped_inputs_share_the_products_across_covariances(connect):
    con = connect(budget=1e15)
    planned = con.explain("SELECT COVAR_SAMP(age, hours) AS a, CORR(hours, age) AS b "
                          "FROM adult", epsilon=1)["statements"][0]
    assert [p["part"] for p in planned["aggregates"]].count("products") == 1


def test_a_nullable_input_comes_first_so_its_count_is_shared(connect):
    """With hours never NULL, the rows of COVAR_POP(hours, age) are age's: its count is
    COUNT(age)'s and its sum VAR_POP(age)'s, whichever input is written first."""
    con = connect(budget=1e15)
    for covariance in ("COVAR_POP(age, COALESCE(hours, 0))", "COVAR_POP(COALESCE(hours, 0), age)"):
        planned = con.explain(f"SELECT VAR_POP(age) AS v, {covariance} AS c FROM adult",
                              epsilon=1)["statements"][0]
        assert sorted(p["part"] for p in planned["aggregates"]) == \
            ["count", "products", "sum", "sum", "sumsq"]


def test_a_max_of_ints_over_whole_bins_is_an_int(connect):
    """MIN and MAX of an int column whose bounds hold at most 1,000 values are drawn from its
    whole values: released as ints and described as BIGINT (they were 90.0, DOUBLE), as
    SQL types them; a MEDIAN stays a DOUBLE, as SQL's."""
    con = connect(budget=1e15)
    cursor = con.cursor()
    cursor.execute("SELECT sex, MAX(age) AS m, MIN(hours) AS h, MEDIAN(age) AS d, "
                   "MAX(age) / 2 AS half FROM adult GROUP BY sex ORDER BY m", epsilon=1)
    assert [c[1] for c in cursor.description] == ["VARCHAR", "BIGINT", "BIGINT", "DOUBLE",
                                                  "DOUBLE"]
    for _, high, low, median, half in cursor.fetchall():
        assert type(high) is int and type(low) is int and type(median) is float
        assert half == high / 2
    frame = con.cursor().execute("SELECT MAX(age) AS m FROM adult", epsilon=1).fetchdf()
    assert str(frame["m"].dtype) == "int64"


def test_a_max_of_ints_over_more_values_than_bins_is_an_int_too(connect):
    """Since 041e75d a MAX of an int between whole bounds is a whole number typed BIGINT
    however many values the bounds hold (age * 100: 7,301 values, 1,000 bins)."""
    con = connect(budget=1e15)
    cursor = con.cursor()
    cursor.execute("SELECT MAX(age * 100) AS m FROM adult", epsilon=1)
    assert cursor.description[0][1] == "BIGINT"
    assert type(cursor.fetchone()[0]) is int


def test_a_cube_of_many_keys_is_refused_at_once(connect):
    """The hint listed every grouping before writing four: a CUBE of 18 keys (262,144)
    held the engine 46 s for its refusal."""
    import time

    con = connect(budget=1e15)
    keys = ", ".join(f"age + {i}" for i in range(18))
    started = time.perf_counter()
    err = refusal(con, f"SELECT COUNT(*) AS n FROM adult GROUP BY CUBE ({keys})",
                  dpsql.UnsupportedSQLError)
    assert time.perf_counter() - started < 5
    assert "262,140 more grouping(s)" in err.hint


@pytest.mark.parametrize(("group_by", "groupings"), [
    ("ROLLUP (education, sex)", [["education", "sex"], ["education"], []]),
    ("CUBE (sex, salary)", [["sex", "salary"], ["sex"], ["salary"], []]),
    ("sex, GROUPING SETS ((education, salary), (salary), ())",
     [["sex", "education", "salary"], ["sex", "salary"], ["sex"]]),
])
def test_a_rollup_hints_the_script_of_its_groupings(connect, group_by, groupings):
    """ROLLUP, CUBE and GROUPING SETS said 'send one query per grouping', each then charged
    on its own: the hint is the script of the groupings, which one ε covers, and it runs."""
    con = connect(budget=1e15)
    keys = ", ".join(groupings[0])
    err = refusal(con, f"SELECT {keys}, COUNT(*) AS n FROM adult WHERE age > 30 "
                  f"GROUP BY {group_by}", dpsql.UnsupportedSQLError)
    assert "executescript" in err.hint and "dpsql run" in err.hint
    script = err.hint.split(":\n", 1)[1]
    statements = [s for s in script.split(";\n") if s.strip()]
    assert len(statements) == len(groupings)
    for statement, keys_of in zip(statements, groupings, strict=True):
        assert "WHERE age > 30" in statement
        assert statement.rstrip(";").endswith(f"GROUP BY {', '.join(keys_of)}" if keys_of
                                              else "age > 30")
    cursor = con.cursor()
    cursor.executescript(script, epsilon=1)
    assert cursor.epsilon_spent == 1
    sets = [cursor.fetchall()]
    while cursor.nextset():
        sets.append(cursor.fetchall())
    assert [len(rows[0]) for rows in sets] == [len(k) + 1 for k in groupings]


@pytest.mark.parametrize("sql", [
    "SELECT day, COUNT(*) AS n, 5 AS n_low FROM visits GROUP BY day",
    "SELECT day, COUNT(*) AS N, COUNT(*) AS n_HIGH FROM visits GROUP BY day",
    "SELECT day AS d, day || 'x' AS d_low, COUNT(*) AS n FROM visits GROUP BY day"])
def test_an_output_named_as_an_interval_column_is_refused(connect, sql):
    """An interval's ends are named <column>_low and <column>_high: an output of that name
    hid one end (intervals(), pandas) or was overwritten by it (polars, Arrow, a server's
    rows named it twice)."""
    err = refusal(connect(), sql, dpsql.ProgrammingError)
    assert "interval column" in err.message and "rename" in err.hint


@pytest.mark.parametrize("call", [
    {"sql": "SELECT day, COUNT(*) AS n FROM visits GROUP BY day", "accuracy": 1.7e308},
    {"sql": "SELECT /* dpsql: ci95 <= 1e308 */ day, SUM(amount) AS s FROM visits GROUP BY day"}])
def test_an_accuracy_target_past_1e300_is_refused(connect, call):
    """Its half-width bisection overflowed the doubles: an OverflowError, not a dpsql.Error,
    from execute, explain and the server (adversary round 28d); nothing is charged."""
    con = connect()
    call = dict(call)
    sql = call.pop("sql")
    with pytest.raises(dpsql.PrivacyParameterError, match="at most 1e300"):
        con.execute(sql, **call)
    with pytest.raises(dpsql.PrivacyParameterError, match="at most 1e300"):
        con.explain(sql, **call)
    assert con.budget_spent.epsilon == 0
