"""Exact samplers: seeded streams stay fixed, the buffered OS source is uniform and fork-safe."""

from __future__ import annotations

import math
import os
from fractions import Fraction

import pytest
from scipy.stats import chisquare

import dpsql
from dpsql.mechanisms import samplers
from dpsql.mechanisms.samplers import RandomSource, discrete_gaussian, discrete_laplace

# Drawn with the Fraction-based samplers on random.SystemRandom/Random, before the integer
# rewrite: a seed must keep giving these values, since experiments compare seeded outputs.
PINNED = [
    (discrete_laplace, Fraction(3, 2),
     [-2, -1, -1, -2, -4, -1, 2, 4, 0, 0, 7, 4, -3, 0, 0, 0, 0, 1, 2, 1]),
    (discrete_laplace, Fraction(400), [-135, -212, 665, -613, -102, 517, -569, -304, 762, 1097]),
    (discrete_laplace, Fraction(123456, 7),
     [-28465, -9874, 14499, 1095, -13581, -6194, 4008, 10676, -4420, -7251]),
    (discrete_gaussian, Fraction(1000, 3),
     [-8, 21, -32, 10, 26, 7, -11, 29, 8, -18, -14, -4, 5, 20, -22, -11, -3, -7, -3, -17]),
    (discrete_gaussian, Fraction(4),
     [0, 1, -1, 2, -1, 0, 3, 0, 1, -2, 0, 0, 1, 0, 2, 1, 1, -2, -1, -1]),
]

# A correct source fails a test below with probability about this small.
P_FLOOR = 1e-7


@pytest.mark.parametrize("sampler,parameter,expected", PINNED,
                         ids=[f"{s.__name__}-{p}" for s, p, _ in PINNED])
def test_seeded_stream_is_pinned(sampler, parameter, expected):
    rng = RandomSource(insecure_seed=2024)
    assert [sampler(parameter, rng) for _ in expected] == expected


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_does_not_reuse_the_parents_buffered_bytes():
    rng = RandomSource()
    samplers._discard_buffers()
    rng.bits(8)  # a fresh 4 KiB buffer, 4095 bytes unread: the child inherits them
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, rng.bits(256).to_bytes(32, "big"))
        finally:
            os._exit(0)
    os.close(write)
    parent = rng.bits(256).to_bytes(32, "big")
    child = b""
    while chunk := os.read(read, 32 - len(child)):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    assert len(child) == 32
    assert child != parent


@pytest.mark.parametrize("n", [2, 6, 256, 1000, 2**70 + 3])
def test_secure_below_is_uniform(n):
    rng = RandomSource()
    draws = [rng.below(n) for _ in range(60_000)]
    assert 0 <= min(draws) and max(draws) < n
    bins = min(n, 16)
    observed = [0] * bins
    for r in draws:
        observed[r * bins // n] += 1
    expected = [len(draws) * (((i + 1) * n + bins - 1) // bins - (i * n + bins - 1) // bins) / n
                for i in range(bins)]  # bin i holds the r with i·n ≤ r·bins < (i+1)·n
    assert chisquare(observed, expected).pvalue > P_FLOOR


def test_secure_bits_and_uniform():
    rng = RandomSource()
    assert rng.is_secure
    assert rng.bits(0) == 0
    assert rng.below(1) == 0
    with pytest.raises(ValueError):
        rng.bits(-1)
    with pytest.raises(ValueError):
        rng.below(0)
    for k in (1, 7, 8, 9, 62, 64, 65, 8 * 5000 + 3):  # the last one bypasses the buffer
        values = [rng.bits(k) for _ in range(64)]
        assert all(0 <= v < 2**k for v in values)
        assert max(values).bit_length() > k - 8  # the top bits are used
    floats = [rng.uniform_real(0.0, 1.0) for _ in range(20_000)]
    assert all(0.0 <= x < 1.0 for x in floats)
    assert all((x * 2**53).is_integer() for x in floats)
    mean = sum(floats) / len(floats)
    assert abs(mean - 0.5) < 6 * math.sqrt(1 / 12 / len(floats))


@pytest.mark.parametrize("secure", [False, True])
def test_bernoulli_categorical_and_sample_are_exact(secure):
    rng = RandomSource() if secure else RandomSource(insecure_seed=9)
    draws = 30_000
    hits = sum(rng.bernoulli(Fraction(2, 7)) for _ in range(draws))
    assert chisquare([hits, draws - hits], [draws * 2 / 7, draws * 5 / 7]).pvalue > P_FLOOR
    weights = [Fraction(1, 10), Fraction(0), Fraction(3, 5), Fraction(3, 10)]
    observed = [0] * 4
    for i in samplers.Categorical(weights).draws(rng, draws):
        observed[i] += 1
    assert observed[1] == 0
    kept = [0, 2, 3]
    assert chisquare([observed[i] for i in kept],
                     [draws * float(weights[i]) for i in kept]).pvalue > P_FLOOR
    # every ordered pair of 2 distinct values out of 5 is equally likely (20 of them)
    pairs = [tuple(rng.sample(5, 2)) for _ in range(draws)]
    assert all(a != b for a, b in pairs)
    counts = [pairs.count((a, b)) for a in range(5) for b in range(5) if a != b]
    assert chisquare(counts).pvalue > P_FLOOR
    assert sorted(rng.sample(6, 6)) == list(range(6))


def test_normal_has_its_mean_and_standard_deviation():
    rng = RandomSource(insecure_seed=4)
    xs = [rng.normal(3.0, 2.0) for _ in range(20_000)]
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    assert abs(mean - 3.0) < 6 * 2.0 / math.sqrt(len(xs))
    assert abs(sd - 2.0) < 0.05
    assert rng.normal(1.5, 0.0) == 1.5


def test_bad_probabilities_and_sizes_are_dpsql_errors():
    rng = RandomSource(insecure_seed=0)
    with pytest.raises(dpsql.ProgrammingError):
        rng.bernoulli(Fraction(3, 2))
    with pytest.raises(dpsql.ProgrammingError):
        rng.sample(3, 4)


def _chi_square_against(pmf, draws, lo, hi):
    """p-value of the draws against pmf, with values outside [lo, hi] pooled into the ends."""
    observed = [0] * (hi - lo + 1)
    for z in draws:
        observed[min(max(z, lo), hi) - lo] += 1
    inner = [pmf(z) for z in range(lo + 1, hi)]
    tail = (1 - sum(inner)) / 2  # both pmfs are symmetric
    expected = [len(draws) * p for p in [tail, *inner, tail]]
    return chisquare(observed, expected).pvalue


def test_secure_discrete_laplace_has_the_exact_distribution():
    scale = Fraction(3, 2)
    q = math.exp(-1 / scale)
    pmf = lambda z: (1 - q) / (1 + q) * q ** abs(z)
    rng = RandomSource()
    draws = [discrete_laplace(scale, rng) for _ in range(20_000)]
    assert _chi_square_against(pmf, draws, -7, 7) > P_FLOOR


def test_secure_discrete_gaussian_has_the_exact_distribution():
    sigma2 = Fraction(4)
    norm = sum(math.exp(-z * z / (2 * sigma2)) for z in range(-60, 61))
    pmf = lambda z: math.exp(-z * z / (2 * sigma2)) / norm
    rng = RandomSource()
    draws = [discrete_gaussian(sigma2, rng) for _ in range(20_000)]
    assert _chi_square_against(pmf, draws, -6, 6) > P_FLOOR
