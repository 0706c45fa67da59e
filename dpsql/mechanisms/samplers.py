"""Exact discrete Laplace and Gaussian sampling on a cryptographically secure random source.

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
from collections.abc import Callable
from fractions import Fraction
from math import gcd, isqrt

from dpsql.errors import InsecureRandomnessWarning

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
    """Uniform integers from the OS CSPRNG, or from a seeded PRNG when named insecure."""

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

    def uniform(self) -> float:
        """Uniform float in [0, 1) (the exponential mechanism's draw)."""
        return self._rng.random()

    def bits(self, k: int) -> int:
        """Uniform k-bit integer (used for per-query hash salts)."""
        return self._rng.getrandbits(k)


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


def bernoulli_exp(gamma: Fraction, rng: RandomSource) -> bool:
    """Exact Bernoulli(exp(-gamma)) for rational gamma >= 0."""
    return _bernoulli_exp(gamma.numerator, gamma.denominator, rng._below)


def _discrete_laplace(t: int, s: int, below: Callable[[int], int]) -> int:
    """discrete_laplace for scale = t/s in lowest terms, t > 0 (CKS Algorithm 2)."""
    while True:
        u = below(t)
        g = gcd(u, t)
        if not _bernoulli_exp_le1(u // g, t // g, below):  # Bernoulli(exp(-u/t)), u < t
            continue
        v = 0
        while _bernoulli_exp_one(below):
            v += 1
        y = (u + t * v) // s
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
