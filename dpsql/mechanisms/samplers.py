"""Exact discrete Laplace, Gaussian and ℓ∞ sampling on a cryptographically secure random source.

The samplers are Algorithms 1-3 of Canonne, Kamath and Steinke, "The Discrete Gaussian for
Differential Privacy" (NeurIPS 2020): they use only integer arithmetic and exact Bernoulli
trials with rational parameters, so the output distribution is exactly
P(z) ∝ exp(-|z| / scale) (or exp(-z²/(2σ²))) over the integers, with no floating-point
rounding to exploit (Mironov 2012). Noise is drawn in grid units; real answers are integers
on a fixed grid.

Randomness comes from os.urandom, read 4 KiB at a time into a per-thread buffer that is
discarded in a forked child, so no byte is ever used twice. A seeded source (tests only) is
a ``random.Random``; each Bernoulli trial p/q (in lowest terms) is drawn as
``randrange(q) < p``, so a seed fixes the samples.
"""

from __future__ import annotations

import io
import os
import random
import threading
import warnings
from bisect import bisect_right
from collections.abc import Callable, Sequence
from fractions import Fraction
from functools import lru_cache
from math import ceil, comb, cos, exp, factorial, gcd, isqrt, lcm, log, pi, prod, sqrt

from dpsql.errors import InsecureRandomnessWarning, ProgrammingError

_BUFFER_BYTES = 4096


class _Buffers(threading.local):
    """A thread's unread os.urandom bytes (per thread, so two threads never share bytes)."""

    def __init__(self) -> None:
        self.unread = io.BytesIO()


_buffers = _Buffers()


def _discard_buffers() -> None:
    # A forked child inherits the parent's unread bytes; using them would repeat the parent's
    # noise, so the child starts empty. The hook runs for every fork made through Python
    # (os.fork, multiprocessing); checking os.getpid() per draw would cost ~180 ns instead.
    global _buffers
    _buffers = _Buffers()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_discard_buffers)


class _BufferedOSRandom(random.Random):
    """random.Random on os.urandom bytes, read 4 KiB per syscall instead of one per call."""

    def seed(self, *args, **kwargs) -> None:
        """Ignored: the OS source cannot be seeded (as in SystemRandom)."""

    def getstate(self, *args, **kwargs):
        raise NotImplementedError("the OS random source has no state")

    setstate = getstate

    def _read(self, n: int) -> bytes:
        """n fresh bytes from os.urandom."""
        buffers = _buffers
        data = buffers.unread.read(n)
        if len(data) == n:
            return data
        if n > _BUFFER_BYTES // 4:  # large requests would only churn the buffer
            return os.urandom(n)
        # The short read's leftover bytes are dropped, never reused.
        buffers.unread = io.BytesIO(os.urandom(_BUFFER_BYTES))
        return buffers.unread.read(n)

    def getrandbits(self, k: int) -> int:
        """Uniform k-bit integer (0 for k = 0)."""
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        nbytes = (k + 7) // 8
        return int.from_bytes(self._read(nbytes), "big") >> (nbytes * 8 - k)

    def random(self) -> float:
        """Uniform float in [0, 1) with 53 random bits."""
        return (int.from_bytes(self._read(7), "big") >> 3) * 2.0 ** -53

    def below(self, n: int) -> int:
        """Uniform integer in [0, n) by rejection on the fewest whole bytes that cover n - 1."""
        if n <= 1:
            if n == 1:
                return 0
            raise ValueError("empty range for below()")
        k = (n - 1).bit_length()
        nbytes = (k + 7) >> 3
        shift = (nbytes << 3) - k
        buffers = _buffers
        while True:
            data = buffers.unread.read(nbytes)
            if len(data) != nbytes:
                data = self._read(nbytes)
            r = int.from_bytes(data, "big") >> shift
            if r < n:
                return r


class RandomSource:
    """Uniform integers from the OS CSPRNG, or from a seeded PRNG when named insecure.

    Every random draw dpsql makes goes through one of these: the engine's noise, the
    exponential mechanism, the local randomizers of ``dpsql randomize`` and the evaluators'
    client-side perturbations. The default reads ``os.urandom``; ``insecure_seed`` makes the
    draws reproducible for tests and experiments, gives no privacy, and warns
    (``InsecureRandomnessWarning``). Beyond uniform integers (``below``, ``bits``) it offers
    exact Bernoulli(p) for rational p, a uniform choice of k distinct indices, the exact
    discrete Laplace, and uniform and Gaussian reals (from fixed-point uniforms) for
    perturbations that are not differentially private.

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> rng = RandomSource(insecure_seed=7)
        >>> 0 <= rng.below(10) < 10, rng.bernoulli(Fraction(1)), rng.bernoulli(Fraction(0))
        (True, True, False)
        >>> picked = rng.sample(10, 4)
        >>> len(set(picked)) == 4 and all(0 <= i < 10 for i in picked)
        True
    """

    __module__ = "dpsql"

    def __init__(self, insecure_seed: int | None = None) -> None:
        if insecure_seed is None:
            rng = _BufferedOSRandom()
            self._rng: random.Random = rng
            self._below: Callable[[int], int] = rng.below
            self.is_secure = True
        else:
            warnings.warn(
                "insecure_seed is set: the noise is reproducible and gives no privacy; "
                "use it only for tests and experiments",
                InsecureRandomnessWarning,
                stacklevel=3,
            )
            self._rng = random.Random(insecure_seed)
            # randrange, not a faster equivalent: seeded outputs must stay reproducible.
            self._below = self._rng.randrange
            self.is_secure = False

    def below(self, n: int) -> int:
        """Uniform integer in [0, n)."""
        return self._below(n)

    def bits(self, k: int) -> int:
        """Uniform k-bit integer (per-query hash salts, fixed-point uniforms)."""
        return self._rng.getrandbits(k)

    def bernoulli(self, p: Fraction) -> bool:
        """Exact Bernoulli(p) for rational 0 ≤ p ≤ 1: ``below(q) < r`` for p = r/q.

        A float p is taken as the rational it holds exactly (``Fraction(p)``), not rounded.
        """
        p = Fraction(p)
        if not 0 <= p <= 1:
            raise ProgrammingError(f"a probability must be in [0, 1], got {p}",
                                   hint="pass p as a probability")
        return self._below(p.denominator) < p.numerator

    def sample(self, n: int, k: int) -> list[int]:
        """k distinct integers of ``range(n)``, every k-subset (and order) equally likely.

        A partial Fisher-Yates shuffle: k draws of ``below``, exact for any n.
        """
        if not 0 <= k <= n:
            raise ProgrammingError(f"cannot pick {k} distinct integers of range({n})",
                                   hint="pass 0 <= k <= n")
        moved: dict[int, int] = {}  # the positions swapped so far, of a virtual range(n)
        picked = []
        for i in range(k):
            j = i + self._below(n - i)
            picked.append(moved.get(j, j))
            moved[j] = moved.get(i, i)
        return picked

    def discrete_laplace(self, scale: Fraction) -> int:
        """One exact two-sided geometric sample, P(z) ∝ exp(−|z|/scale) (CKS Algorithm 2).

        A float scale is taken as the rational it holds exactly.
        """
        scale = Fraction(scale)
        if not scale > 0:
            raise ProgrammingError(f"a Laplace scale must be positive, got {scale}",
                                   hint="scale = sensitivity / ε with ε > 0")
        return discrete_laplace(scale, self)

    def uniform_real(self, low: float, high: float) -> float:
        """A uniform point of the grid low + (high − low)·j/2^53, j = 0 … 2^53 − 1.

        For perturbations that are not a DP mechanism (their float arithmetic leaks nothing a
        guarantee depends on): the grid is as fine as a double's mantissa.
        """
        return low + (high - low) * (self._rng.getrandbits(53) * _TWO_TO_MINUS_53)

    def normal(self, mean: float, sd: float) -> float:
        """A Gaussian of mean ``mean`` and standard deviation ``sd`` (Box-Muller transform).

        Two fixed-point uniforms of this source (53 bits each) go through log, sqrt and cos in
        floating point, so the law is Gaussian up to float rounding, not exactly: this is for
        perturbations that are not a DP mechanism (TRR's sets, RPT masking), where rounding
        weakens no guarantee. DP noise is ``discrete_gaussian``, which is exact. (An exact
        discrete Gaussian on a fine grid costs about 10 µs a draw in CPython, this about 1.)
        """
        if sd == 0:
            return float(mean)
        getrandbits = self._rng.getrandbits
        u = (getrandbits(53) + 1) * _TWO_TO_MINUS_53  # in (0, 1]: log(u) is finite
        v = getrandbits(53) * _TWO_TO_MINUS_53
        return mean + sd * sqrt(-2.0 * log(u)) * cos(2.0 * pi * v)


_TWO_TO_MINUS_53 = 2.0 ** -53


class Categorical:
    """Exact draws from a finite distribution with rational weights (one ``below`` a draw).

    The weights are put over one common denominator D; a draw is the index whose cumulative
    interval holds ``below(D)``, so P(i) = w_i / Σ w exactly.

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> table = Categorical([Fraction(1, 4), Fraction(3, 4), Fraction(0)])
        >>> table.draws(RandomSource(insecure_seed=1), 8).count(2)
        0
    """

    def __init__(self, weights: Sequence[Fraction | int]) -> None:
        exact = [Fraction(w) for w in weights]
        if not exact or any(w < 0 for w in exact) or sum(exact) == 0:
            raise ValueError("weights must be non-negative with a positive sum")
        scale = lcm(*(w.denominator for w in exact))
        running, self._ends = 0, []
        for w in exact:
            running += int(w * scale)
            self._ends.append(running)  # index i holds the integers [ends[i-1], ends[i])
        self._total = running

    def draw(self, rng: RandomSource) -> int:
        """One index."""
        return bisect_right(self._ends, rng._below(self._total))

    def draws(self, rng: RandomSource, size: int) -> list[int]:
        """``size`` independent indices."""
        below, ends, total = rng._below, self._ends, self._total
        return [bisect_right(ends, below(total)) for _ in range(size)]


# The Bernoulli helpers take gamma = n/d as integers and draw through `below` (a bound
# RandomSource._below), avoiding Fraction objects and a method lookup per trial.

def _bernoulli_exp_le1(n: int, d: int, below: Callable[[int], int]) -> bool:
    """Bernoulli(exp(-n/d)) for 0 <= n <= d, gcd(n, d) = 1 (CKS Algorithm 1).

    Trial k is Bernoulli(n/(dk)) drawn as below(q) < p with p/q = n/(dk) in lowest terms.
    """
    k = 1
    while True:
        g = gcd(n, k)  # = gcd(n, dk), as n and d are coprime
        if below(d * (k // g)) >= n // g:
            return k % 2 == 1
        k += 1


def _bernoulli_exp_one(below: Callable[[int], int]) -> bool:
    """Bernoulli(exp(-1)): _bernoulli_exp_le1(1, 1, below), whose trial k is below(k) < 1."""
    k = 1
    while below(k) == 0:
        k += 1
    return k % 2 == 1


def _bernoulli_exp(n: int, d: int, below: Callable[[int], int]) -> bool:
    """Bernoulli(exp(-n/d)) for n >= 0, d > 0."""
    g = gcd(n, d)
    n, d = n // g, d // g
    while n > d:
        if not _bernoulli_exp_one(below):
            return False
        n -= d
    return _bernoulli_exp_le1(n, d, below)


def _geometric(t: int, s: int, below: Callable[[int], int]) -> int:
    """Y ≥ 0 with P(Y = y) ∝ exp(-y·s/t), t, s > 0 (the first part of CKS Algorithm 2): X
    with P(X = x) ∝ exp(-x/t) is U + t·V, U uniform in [0, t) kept with probability
    exp(-U/t) and V geometric with parameter exp(-1); Y = ⌊X/s⌋."""
    while True:
        u = below(t)
        g = gcd(u, t)
        if _bernoulli_exp_le1(u // g, t // g, below):  # Bernoulli(exp(-u/t)), u < t
            break
    v = 0
    while _bernoulli_exp_one(below):
        v += 1
    return (u + t * v) // s


def _discrete_laplace(t: int, s: int, below: Callable[[int], int]) -> int:
    """discrete_laplace for scale = t/s in lowest terms, t > 0 (CKS Algorithm 2)."""
    while True:
        y = _geometric(t, s, below)
        negative = below(2) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def discrete_laplace(scale: Fraction, rng: RandomSource) -> int:
    """One exact sample Z with P(Z = z) ∝ exp(-|z| / scale), z an integer.

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> isinstance(discrete_laplace(Fraction(3, 2), RandomSource(insecure_seed=1)), int)
        True
    """
    if scale <= 0:
        raise ValueError("scale must be positive")
    return _discrete_laplace(scale.numerator, scale.denominator, rng._below)


def discrete_gaussian(sigma2: Fraction, rng: RandomSource) -> int:
    """One exact sample Z with P(Z = z) ∝ exp(−z²/(2σ²)) (CKS Algorithm 3).

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> isinstance(discrete_gaussian(Fraction(4), RandomSource(insecure_seed=1)), int)
        True
    """
    if sigma2 <= 0:
        raise ValueError("sigma2 must be positive")
    a, b = sigma2.numerator, sigma2.denominator  # sigma2 = a / b
    t = isqrt(a // b) + 1
    below = rng._below
    while True:
        y = _discrete_laplace(t, 1, below)
        # gamma = (|y| - sigma2/t)² / (2 sigma2) = (|y|·b·t - a)² / (2·a·b·t²)
        if _bernoulli_exp((abs(y) * b * t - a) ** 2, 2 * a * b * t * t, below):
            return y


def discrete_linf(radii: Sequence[Fraction], epsilon: Fraction, resolution: int,
                  rng: RandomSource) -> list[int]:
    """One exact sample z ∈ Z^d with P(z) ∝ exp(−ε·N(z)), N(z) = max_j ⌈L·|z_j|/D_j⌉ / L.

    The ℓ∞ (box) K-norm mechanism of Hardt and Talwar (2010) on the integer lattice, with the
    norm's levels on a grid of 1/L (``resolution``); ``radii`` are the D_j > 0. With
    q = exp(−ε/L), the box B_k = {z : L·N(z) ≤ k} = Π_j [−⌊k·D_j/L⌋, ⌊k·D_j/L⌋] and a level
    J drawn with P(J = k) ∝ |B_k|·q^k, a point drawn uniformly from B_J has
    P(z) ∝ Σ_{k ≥ L·N(z)} q^k ∝ exp(−ε·N(z)). J is drawn by rejection from the negative
    binomial P(k) ∝ C(k + d, d)·q^k (a sum of d + 1 geometric draws, ``_geometric``),
    keeping k with probability |B_k| / (M·C(k + d, d)), M ≥ sup_k |B_k| / C(k + d, d)
    (``_box_bound``): every step is an exact draw with integer or rational parameters. When
    that bound keeps too few draws (levels far finer than the radii), independent discrete
    Laplace draws of scale d·D_j/ε are used instead, each vector kept with probability
    exp(−ε·(N(z) − Σ_j |z_j|/(d·D_j))) ≤ 1 (about d!/d^d of them).

    Example:
        >>> import warnings; warnings.simplefilter("ignore")
        >>> z = discrete_linf([Fraction(1), Fraction(36)], Fraction(1), 16,
        ...                   RandomSource(insecure_seed=3))
        >>> len(z), all(isinstance(v, int) for v in z)
        (2, True)
    """
    radii = tuple(Fraction(r) for r in radii)
    epsilon = Fraction(epsilon)
    if not radii or any(r <= 0 for r in radii) or epsilon <= 0 or resolution < 1:
        raise ValueError("radii and epsilon must be positive and the resolution at least 1")
    below = rng._below
    bound, _ = _box_bound(radii, resolution, epsilon)
    if bound is None:
        return _linf_by_laplace(radii, epsilon, resolution, below)
    d, step = len(radii), epsilon / resolution
    while True:
        level = sum(_geometric(step.denominator, step.numerator, below) for _ in range(d + 1))
        sides = _box_sides(level, radii, resolution)
        keep = Fraction(prod(sides)) / (bound * comb(level + d, d))
        if keep.numerator > keep.denominator:  # M is a bound by construction: never here
            raise ArithmeticError("the ℓ∞ sampler's box bound does not hold")
        if below(keep.denominator) < keep.numerator:
            return [below(side) - side // 2 for side in sides]


BOX_LEVELS = 1 << 14  # the most levels _box_bound takes the ratio of exactly


def _box_sides(level: int, radii: tuple[Fraction, ...], resolution: int) -> list[int]:
    """Points per coordinate of the box of a level: 2·⌊k·D_j/L⌋ + 1, exactly."""
    return [2 * (level * r.numerator // (resolution * r.denominator)) + 1 for r in radii]


def linf_kept(radii: tuple[Fraction, ...], resolution: int, epsilon: Fraction) -> float:
    """The share of its proposals ``discrete_linf`` keeps for these parameters (estimated):
    a draw costs about d/share coordinate draws."""
    return _box_bound(tuple(radii), resolution, Fraction(epsilon))[1]


@lru_cache(maxsize=256)
def _box_bound(radii: tuple[Fraction, ...], resolution: int, epsilon: Fraction
               ) -> tuple[Fraction | None, float]:
    """M ≥ sup_k |B_k| / C(k + d, d) for ``discrete_linf`` (None when its level-and-box draw
    would keep fewer proposals than the Laplace one, d!/d^d), and the share of proposals kept.

    Below K = 64·max_j s_j levels (s_j = L/(2·D_j)), where the floors of ⌊k·D_j/L⌋ weigh,
    the ratio is taken exactly; beyond, |B_k| ≤ Π_j (2·D_j/L)·(k + s_j) and
    C(k + d, d) = Π_i (k + i)/d!, so the ratio is at most d!·Π_j (2·D_j/L)·Π_i
    max(1, (K + s_(i))/(K + i)) (s sorted, paired with i = d, …, 1), within 1/64 of its limit.
    None too when K would exceed ``BOX_LEVELS``. The share of proposals kept is estimated in
    floating point over the negative binomial's bulk: it only chooses between two exact
    samplers.
    """
    d, L = len(radii), resolution
    laplace = factorial(d) / d ** d
    halves = [L / (2 * r) for r in radii]
    levels = max(64, ceil(64 * max(halves)))
    if levels > BOX_LEVELS:
        return None, laplace

    def box(k: int) -> int:
        return prod(_box_sides(k, radii, L))

    best = Fraction(0)
    for k in range(levels):
        b, c = box(k), comb(k + d, d)
        if b * best.denominator > best.numerator * c:
            best = Fraction(b, c)
    tail = factorial(d) * prod(2 * r / L for r in radii)
    for s, i in zip(sorted(halves, reverse=True), range(d, 0, -1), strict=True):
        tail *= max(Fraction(1), (levels + s) / (levels + i))
    bound = max(best, tail)
    # Σ_k NB(k)·|B_k|/(M·C(k + d, d)) over 512 levels spread to 8 sd above the mean
    top = (d + 1 + 8 * sqrt(d + 1)) * L / float(epsilon)
    ks = sorted({int(top * i / 512) for i in range(513)})
    weights = [comb(k + d, d) * exp(-float(epsilon) * k / L) for k in ks]
    kept = sum(w * float(Fraction(box(k), comb(k + d, d)) / bound)
               for w, k in zip(weights, ks, strict=True)) / sum(weights)
    return (bound, kept) if kept >= laplace else (None, laplace)


def _linf_by_laplace(radii: tuple[Fraction, ...], epsilon: Fraction, resolution: int,
                     below: Callable[[int], int]) -> list[int]:
    """``discrete_linf`` by rejection from independent discrete Laplace draws."""
    d = len(radii)
    scales = [d * r / epsilon for r in radii]
    while True:
        z = [_discrete_laplace(scale.numerator, scale.denominator, below) for scale in scales]
        level = Fraction(max(-((-resolution * abs(v) * r.denominator) // r.numerator)
                             for v, r in zip(z, radii, strict=True)), resolution)  # N(z)
        average = sum((Fraction(abs(v)) / (d * r) for v, r in zip(z, radii, strict=True)),
                      Fraction(0))
        gamma = epsilon * (level - average)
        if _bernoulli_exp(gamma.numerator, gamma.denominator, below):
            return z
