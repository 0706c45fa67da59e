"""Time per exact discrete Laplace draw: the previous samplers against the current ones.

Run: ``python benchmarks/samplers.py [--draws 20000] [--repeats 5]``

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

from dpsql.mechanisms.samplers import RandomSource, discrete_laplace

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


if __name__ == "__main__":
    main()
