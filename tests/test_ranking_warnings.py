"""NoisyRankingWarning: a top k whose cut is within the noise warns, computed from the
released values only (post-processing), and warns again when the ledger returns the
stored answer of a repeated statement."""

from __future__ import annotations

import warnings

import pytest
from conftest import catalogue

import dpsql

TOP = "SELECT education, COUNT(*) AS n FROM adult GROUP BY education ORDER BY n DESC LIMIT 2"


def test_a_reused_answer_warns_as_the_first(data_dir):
    """The ledger returns the stored release of a repeated statement (no noise drawn, no ε
    spent); its warnings are post-processing of the same released values, and were lost."""
    with dpsql.connect(metadata=catalogue(data_dir), ledger=data_dir / "reuse.sqlite") as con:
        with pytest.warns(dpsql.NoisyRankingWarning, match="LIMIT 2: the last row kept") as first:
            cursor = con.execute(TOP, epsilon=0.001)
        rows, spent = cursor.fetchall(), con.budget_spent.epsilon
        with pytest.warns(dpsql.NoisyRankingWarning) as again:
            cursor = con.execute(TOP, epsilon=0.001)
        assert cursor.fetchall() == rows and con.budget_spent.epsilon == spent
        assert [str(w.message) for w in again] == [str(w.message) for w in first]
    with dpsql.connect(metadata=catalogue(data_dir), ledger=data_dir / "reuse.sqlite") as con, \
            pytest.warns(dpsql.NoisyRankingWarning, match="LIMIT 2: the last row kept"):
        assert con.execute(TOP, epsilon=0.001).fetchall() == rows  # a new session: the store


def test_a_reused_answer_without_a_warning_stays_quiet(data_dir):
    with dpsql.connect(metadata=catalogue(data_dir), ledger=data_dir / "quiet.sqlite") as con, \
            warnings.catch_warnings():
        warnings.simplefilter("error", dpsql.NoisyRankingWarning)
        first = con.execute(TOP, epsilon=1000).fetchall()
        assert con.execute(TOP, epsilon=1000).fetchall() == first


@pytest.mark.parametrize("sql", [
    f"{TOP[:-len(' ORDER BY n DESC LIMIT 2')]} HAVING COUNT(*) > 30 ORDER BY n DESC LIMIT 2",
    f"{TOP} OFFSET 1",
    f"{TOP[:-len(' ORDER BY n DESC LIMIT 2')]} QUALIFY RANK() OVER (ORDER BY n DESC) <= 9 "
    "ORDER BY n DESC LIMIT 2",
], ids=["having", "offset", "qualify"])
def test_a_top_k_after_having_qualify_or_offset_warns(connect, sql):
    """HAVING, QUALIFY or OFFSET silenced the warning (ε 0.05: ±3,300 at the cut with
    nothing said); it is issued over the rows they leave."""
    with pytest.warns(dpsql.NoisyRankingWarning, match="LIMIT 2: the last row kept"):
        connect(budget=1e6).execute(sql, epsilon=0.001)


def test_offset_warns_of_its_own_cut(connect):
    with pytest.warns(dpsql.NoisyRankingWarning, match="OFFSET 1: the last row skipped"):
        connect(budget=1e6).execute(f"{TOP} OFFSET 1", epsilon=0.001)


def test_having_whose_constant_is_within_the_noise_warns(connect):
    """HAVING COUNT(*) > 2000 of counts near 200 at ±3,000: which rows pass is noise alone
    (MovieLens kept five films where none has more than 583 ratings, with nothing said)."""
    sql = ("SELECT education, COUNT(*) AS n, AVG(age) AS a FROM adult GROUP BY education "
           "HAVING COUNT(*) > 2000 ORDER BY a DESC LIMIT 5")
    with pytest.warns(dpsql.NoisyRankingWarning, match=r"HAVING COUNT\(\*\) > 2000: 16 of 16 "
                      r"rows have a 95% interval holding 2000"):
        connect(budget=1e6).execute(sql, epsilon=0.001)
    with warnings.catch_warnings():  # far from the constant: nothing to say
        warnings.simplefilter("error", dpsql.NoisyRankingWarning)
        connect(budget=1e6).execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex "
                                    "HAVING 5 < COUNT(*)", epsilon=100)
