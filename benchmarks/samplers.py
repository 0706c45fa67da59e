"""Time per exact draw: the previous samplers against the current ones.

Run: ``python benchmarks/samplers.py [--draws 20000] [--repeats 5]``

Discrete Laplace: see below. The ℓ∞ mechanism (``discrete_linf``): by rejection from
independent discrete Laplace draws (``samplers._linf_by_laplace``, about d!/d^d of them kept)
against the level-and-box draw ``discrete_linf`` chooses when it keeps more, on the blocks of
the accuracy benchmark's statements and the README's query (radii in grid units, as their
plans have them) and on blocks of four and six members.

"old" is a private copy of the samplers as they were before the integer rewrite
(random.SystemRandom, one os.urandom call per random integer, Fraction arithmetic in every
Bernoulli trial); "new" is dpsql.mechanisms.samplers (buffered os.urandom, integer
arithmetic). Both use the secure source; the seeded rows compare random.Random(seed) in
both, whose draws are identical (checked here). Timings are medians of interleaved repeats.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import warnings
from fractions import Fraction

from dpsql.mechanisms.samplers import (
    RandomSource,
    _linf_by_laplace,
    discrete_laplace,
    discrete_linf,
)

# --- the previous implementation, kept only for this comparison ---------------------------


def _old_bernoulli(p: Fraction, rng: random.Random) -> bool:
    return rng.randrange(p.denominator) < p.numerator


def _old_bernoulli_exp_le1(gamma: Fraction, rng: random.Random) -> bool:
    k = 1
    while _old_bernoulli(gamma / k, rng):
        k += 1
    return k % 2 == 1


def _old_bernoulli_exp(gamma: Fraction, rng: random.Random) -> bool:
    while gamma > 1:
        if not _old_bernoulli_exp_le1(Fraction(1), rng):
            return False
        gamma -= 1
    return _old_bernoulli_exp_le1(gamma, rng)


def _old_discrete_laplace(scale: Fraction, rng: random.Random) -> int:
    t, s = scale.numerator, scale.denominator
    while True:
        u = rng.randrange(t)
        if not _old_bernoulli_exp(Fraction(u, t), rng):
            continue
        v = 0
        while _old_bernoulli_exp(Fraction(1), rng):
            v += 1
        y = (u + t * v) // s
        negative = rng.randrange(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y

# ------------------------------------------------------------------------------------------


def per_draw(sampler, scale: Fraction, rng, draws: int) -> float:
    start = time.perf_counter()
    for _ in range(draws):
        sampler(scale, rng)
    return (time.perf_counter() - start) / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the seeded sources warn that they are insecure

    for seed in (1, 2):
        old_rng, new_rng = random.Random(seed), RandomSource(insecure_seed=seed)
        old = [_old_discrete_laplace(Fraction(400), old_rng) for _ in range(2000)]
        new = [discrete_laplace(Fraction(400), new_rng) for _ in range(2000)]
        assert old == new, "seeded draws differ from the previous implementation"

    print(f"{'source':8} {'scale':>6} {'old µs/draw':>12} {'new µs/draw':>12} {'old/new':>8}")
    for label, old_source, new_source in [
        ("secure", random.SystemRandom, RandomSource),
        ("seeded", lambda: random.Random(7), lambda: RandomSource(insecure_seed=7)),
    ]:
        for scale in (Fraction(400), Fraction(4)):
            old_rng, new_rng = old_source(), new_source()
            times: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                times["old"].append(per_draw(_old_discrete_laplace, scale, old_rng, args.draws))
                times["new"].append(per_draw(discrete_laplace, scale, new_rng, args.draws))
            old_t, new_t = statistics.median(times["old"]), statistics.median(times["new"])
            print(f"{label:8} {scale!s:>6} {old_t * 1e6:12.2f} {new_t * 1e6:12.2f} "
                  f"{old_t / new_t:8.2f}")
    linf_table(max(args.draws // 10, 200), args.repeats)


# (name, radii, L, ε): the plans' blocks (explain shows them under "joint")
BLOCKS = [
    ("Q1: COUNT, SUM, AVG", (1, 500000, 36), 16, Fraction(1)),
    ("Q2: COUNT, SUM per user", (6, 614400), 128, Fraction(64, 65)),
    ("COUNT+VAR", (1, 589824, 347892350976), 16, Fraction(1)),
    ("README: visits, AVG", (56, 358400, 56), 384, Fraction(384, 390)),
    ("four members", (6, 600, 614400, 6), 128, Fraction(1)),
    ("six members", (6, 600, 614400, 6, 36, 3600), 128, Fraction(1)),
]


def linf_table(draws: int, repeats: int) -> None:
    """Time per ℓ∞ draw: rejection from Laplace against discrete_linf (secure source)."""
    print(f"\n{'ℓ∞ block':26} {'d':>2} {'Laplace µs':>11} {'dpsql µs':>9} {'ratio':>6}")
    rng = RandomSource()
    for name, radii, resolution, epsilon in BLOCKS:
        radii = tuple(Fraction(r) for r in radii)
        times: dict[str, list[float]] = {"laplace": [], "dpsql": []}
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(draws):
                _linf_by_laplace(radii, epsilon, resolution, rng._below)
            times["laplace"].append((time.perf_counter() - start) / draws)
            start = time.perf_counter()
            for _ in range(draws):
                discrete_linf(radii, epsilon, resolution, rng)
            times["dpsql"].append((time.perf_counter() - start) / draws)
        old_t, new_t = statistics.median(times["laplace"]), statistics.median(times["dpsql"])
        print(f"{name:26} {len(radii):>2} {old_t * 1e6:11.1f} {new_t * 1e6:9.1f} "
              f"{old_t / new_t:6.2f}")


if __name__ == "__main__":
    main()
