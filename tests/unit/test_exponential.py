"""The exact exponential mechanism: its draws follow exp(ε·u/(2Δ)) / Z, and nothing else."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from scipy.stats import chisquare

import dpsql
from dpsql.mechanisms.exponential import exponential
from dpsql.mechanisms.samplers import RandomSource

# A correct sampler fails a chi-square test below with probability about this small; the
# seeded cases are fixed, so they pass or fail the same way on every run.
P_FLOOR = 1e-6
DRAWS = 20_000


def _probabilities(utilities, sensitivity, epsilon) -> list[float]:
    weights = [math.exp(float(epsilon * u / (2 * sensitivity))) for u in utilities]
    return [w / sum(weights) for w in weights]


def _p_value(draws: list[int], probabilities: list[float]) -> float:
    observed = [draws.count(i) for i in range(len(probabilities))]
    return chisquare(observed, [len(draws) * p for p in probabilities]).pvalue


CASES = [
    ([0, -1, -2, -3, -4], 1, Fraction(1)),
    ([Fraction(-1, 2), 0, Fraction(-7, 3), -1], Fraction(3), Fraction(5, 2)),
    ([10, 12, 9, 12, 11, 7], Fraction(1, 2), Fraction(1, 3)),  # two best: ties share
]


@pytest.mark.parametrize(("utilities", "sensitivity", "epsilon"), CASES)
@pytest.mark.parametrize("secure", [False, True])
def test_draws_follow_the_exact_distribution(utilities, sensitivity, epsilon, secure):
    rng = RandomSource() if secure else RandomSource(insecure_seed=len(utilities))
    draws = [exponential(utilities, sensitivity, epsilon, rng) for _ in range(DRAWS)]
    assert _p_value(draws, _probabilities(utilities, sensitivity, epsilon)) > P_FLOOR


def test_the_chi_square_test_has_power():
    # The same draws against the distribution of twice the ε: a wrong sampler would pass a
    # test that cannot tell these apart.
    utilities, sensitivity, epsilon = CASES[0]
    rng = RandomSource(insecure_seed=5)
    draws = [exponential(utilities, sensitivity, epsilon, rng) for _ in range(DRAWS)]
    assert _p_value(draws, _probabilities(utilities, sensitivity, 2 * epsilon)) < 1e-12


def test_equal_utilities_give_a_uniform_draw():
    rng = RandomSource(insecure_seed=11)
    draws = [exponential([3] * 7, 1, Fraction(2), rng) for _ in range(14_000)]
    assert _p_value(draws, [1 / 7] * 7) > P_FLOOR


def test_a_huge_epsilon_picks_the_argmax():
    rng = RandomSource(insecure_seed=1)
    utilities = [-40, -3, 0, -1, -200] + [-5] * 995  # 1000 candidates, as a quantile's bins
    assert {exponential(utilities, 1, Fraction(10**6), rng) for _ in range(200)} == {2}


def test_one_candidate_and_huge_utility_gaps_cost_no_float():
    rng = RandomSource(insecure_seed=2)
    assert exponential([Fraction(1, 3)], 1, Fraction(1), rng) == 0
    # exp(-10^300) underflows any float; the exact trials still return the best index
    assert exponential([0, -10**300], 1, Fraction(1), rng) == 0


@pytest.mark.parametrize(("sensitivity", "epsilon"), [(1, Fraction(0)), (0, Fraction(1)),
                                                      (1, Fraction(-1))])
def test_bad_parameters_are_privacy_parameter_errors(sensitivity, epsilon):
    with pytest.raises(dpsql.PrivacyParameterError):
        exponential([0, 1], sensitivity, epsilon, RandomSource(insecure_seed=0))
