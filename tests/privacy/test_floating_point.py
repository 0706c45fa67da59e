"""Mironov (CCS 2012): floating-point Laplace leaks through the set of reachable outputs.

A naive sampler ``x + b·ln(U)`` on doubles can reach only some doubles, and which ones depends
on x: an output that the sampler cannot produce from x' proves the data were not x'. We show
the attack's signature on a naive sampler (positive control), then show that the engine's
noisy sums, which are integers on a 2^k grid plus exact discrete Laplace noise, leave the
attacker nothing: every output lies on the same grid whatever the data, and the low-order
bits of the neighbours' outputs have the same distribution.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from auditor import Shape, add_heavy_visitor, aligned, audit_tables, engine_outputs
from conftest import catalogue
from scipy.stats import chi2_contingency

import dpsql

SCALE = 1.0
MANTISSA = 2**53


def naive_laplace(x: float, scale: float, rng: np.random.Generator) -> float:
    """The textbook floating-point sampler Mironov attacked: x + sign·(−b·ln U)."""
    u = int(rng.integers(1, MANTISSA)) / MANTISSA
    noise = -scale * math.log(u)
    return x + noise if rng.integers(0, 2) else x - noise


def naive_reachable(y: float, x: float, scale: float) -> bool:
    """Can the naive sampler output y from x? (Mironov's membership test.)"""
    for sign in (1, -1):
        for k_guess in _uniforms_near(abs(y - x), scale):
            noise = -scale * math.log(k_guess / MANTISSA)
            if (x + sign * noise) == y:
                return True
    return False


def _uniforms_near(magnitude: float, scale: float) -> range:
    centre = round(math.exp(-magnitude / scale) * MANTISSA)
    return range(max(centre - 3, 1), min(centre + 4, MANTISSA))


def test_naive_float_laplace_shows_the_attack_signature():
    rng = np.random.default_rng(2012)
    from_one = [naive_laplace(1.0, SCALE, rng) for _ in range(2000)]
    from_zero = [naive_laplace(0.0, SCALE, rng) for _ in range(2000)]
    ruled_out = np.mean([not naive_reachable(y, 0.0, SCALE) for y in from_one])
    false_alarms = np.mean([not naive_reachable(y, 0.0, SCALE) for y in from_zero])
    assert false_alarms == 0.0
    # many outputs of x=1 are impossible for x=0: a certain distinction, whatever ε says
    assert ruled_out > 0.3, ruled_out


SUM_SHAPE = Shape("sum_float", "SELECT SUM(amount) AS s FROM visits", add_heavy_visitor)


@pytest.fixture(scope="module")
def engine_sums(tmp_path_factory) -> tuple[np.ndarray, np.ndarray, Fraction]:
    folder = tmp_path_factory.mktemp("fp")
    base = audit_tables()
    on_base, on_other = aligned(
        engine_outputs(folder / "base", base, SUM_SHAPE, runs=120, seed=1),
        engine_outputs(folder / "other", SUM_SHAPE.change(base), SUM_SHAPE, runs=120, seed=2))
    with dpsql.connect(metadata=catalogue(folder / "base"), ledger=":memory:") as con:
        grid = Fraction(con.explain(SUM_SHAPE.sql, epsilon=SUM_SHAPE.epsilon)["statements"][0]["aggregates"][0]["grid"])
    return on_base[:, 0], on_other[:, 0], grid


def test_engine_sums_lie_on_one_grid_for_both_neighbours(engine_sums):
    on_base, on_other, grid = engine_sums
    assert grid < 1  # a float column: the sum really is computed on a fine fixed-point grid
    for outputs in (on_base, on_other):
        # every output is k·2^e: the reachable set is the whole grid, whatever the data
        assert all((Fraction(float(y)) / grid).denominator == 1 for y in outputs)


def test_engine_low_order_bits_do_not_distinguish_neighbours(engine_sums):
    on_base, on_other, grid = engine_sums
    residues = [[int(Fraction(float(y)) / grid) % 8 for y in outputs]
                for outputs in (on_base, on_other)]
    table = np.array([np.bincount(r, minlength=8) for r in residues])
    assert chi2_contingency(table).pvalue > 0.001, table


def test_membership_attack_rules_out_nothing_on_engine_sums(engine_sums):
    """The attacker's test, adapted to the grid: y is reachable from x iff (y − x)/grid ∈ ℤ."""
    on_base, on_other, grid = engine_sums
    for exact in (Fraction(0), Fraction(1234) * grid):  # any data value on the grid
        reachable = [((Fraction(float(y)) - exact) / grid).denominator == 1
                     for y in np.concatenate([on_base, on_other])]
        assert all(reachable)
