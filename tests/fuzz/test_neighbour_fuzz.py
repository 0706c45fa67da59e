"""Neighbour-differential fuzzing: adversarial statements on D and D′ (one person more).

Every statement of the attack grammar runs on D and on D′ = D plus an adversarial person
(neighbours.py: hundreds of rows over every key, extreme and NULL values). It must be refused
on both with nothing charged, or answered on both with every noised part's exact values within
its reported sensitivity (public statements: identical answers); never answered on one and
failed on the other, never an exception outside ``dpsql.Error``. 2,000 statements per run,
20,000 with ``--slow``.
"""

from __future__ import annotations

from collections import Counter

import pytest
from attack_grammar import fuzzed
from neighbours import check_statement, every_neighbour, variant_of

CI_EXAMPLES, SLOW_EXAMPLES = 2000, 20000
OUTCOMES: Counter = Counter()  # outcome of every fuzzed statement, for the coverage check


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """One (D, D′) pair per adversarial person."""
    yield from every_neighbour(tmp_path_factory.mktemp("neighbours"))


def _check(pairs, case) -> None:
    sql, script, delta = case
    OUTCOMES[check_statement(pairs[variant_of(sql)], sql, script=script, delta=delta)] += 1


@fuzzed(CI_EXAMPLES)
def test_neighbours_agree(pairs, case):
    """One person can change no released part by more than its sensitivity, and cannot decide
    whether a statement is answered."""
    _check(pairs, case)


@pytest.mark.slow
@fuzzed(SLOW_EXAMPLES)
def test_neighbours_agree_long(pairs, case):
    """The same contract over 20,000 statements."""
    _check(pairs, case)


def test_fuzz_reached_answers_and_refusals():
    """The fuzz proves something only if its statements reach answers, public answers and
    several kinds of refusal."""
    if not OUTCOMES:
        pytest.skip("run together with the fuzz tests above")
    print("neighbour fuzz outcomes:", dict(OUTCOMES.most_common()))
    total = sum(OUTCOMES.values())
    assert OUTCOMES["released"] > total / 20, OUTCOMES
    assert OUTCOMES["public"] > 0, OUTCOMES
    refusals = {code for code in OUTCOMES if code not in ("released", "public", "failed")}
    assert len(refusals) >= 4, OUTCOMES
    assert {"non_aggregate", "unsupported_sql"} <= refusals, OUTCOMES
