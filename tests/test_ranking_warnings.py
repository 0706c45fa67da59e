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
