"""Local randomization of a table, column by column, before anyone stores it (local DP).

Each record is randomized on its own with a CSPRNG, so whoever holds the output never sees a
true value and may query it exactly: the output is written as a ``public: true`` table.

Every draw comes from a ``RandomSource`` (the OS CSPRNG; ``insecure_seed`` only for
experiments) through exact samplers: the keep coin and the fake value of ERRPH and Warner are
one draw from the exact rational channel (a float parameter is used as the rational it
holds, not rounded), so the local ε computed from the parameters is the mechanism's.

Randomizers (Zhang et al. 2007, "Privacy Preserving Naive Bayes Classification", §3-§4):

* ``ERRPH(domain, p0, hide_probabilities)``: keep the true value with probability p0, else
  output value a_j with probability p_j (p0 + sum p_j = 1). With equal p_j it is k-ary
  randomized response, ``ERRPH.uniform``; local ε = ln(1 + p0 / min_j p_j).
* ``Warner(domain, theta)``: binary Warner model, keep with probability θ, else flip;
  local ε = |ln(θ / (1 - θ))|.
* ``TRR``: numeric y = a·x + b, a and b drawn uniformly from fixed sets A and B of Gaussian
  numbers. Only the sets' means and variances are published (``TRRParameters``). TRR has no
  finite ε (the support of y depends on x).

``randomize_table`` writes the randomized data (Parquet or CSV), a catalogue YAML that declares
it public, and a sidecar JSON (``<output>.randomization.json``) with the machine-readable
parameters and the local ε per attribute and per record (basic composition: the sum). Columns
passed as ``keep`` (the class label in the paper) are copied in the clear and are NOT protected.
On a table with a privacy unit each person publishes at most the declared contribution bound
of records (``bound_units``), so the local ε per person is that public bound times a record's.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Protocol

import click
import duckdb
import numpy as np
import pandas as pd
import yaml

from dpsql.catalog import Catalog, ColumnSpec, TableSpec, load_catalog
from dpsql.cli_params import METADATA_FILE, ExistingFile
from dpsql.connection import connect_custodian
from dpsql.errors import (
    CatalogError,
    DataError,
    PrivacyParameterError,
    ProgrammingError,
)
from dpsql.mechanisms.samplers import Categorical, RandomSource

PARAMETERS_FORMAT = "dpsql-randomization/1"
OUTPUT_SUFFIXES = (".parquet", ".csv")
# Relative slack when checking that p0 + sum(p_j) = 1 (parameters typed as decimals).
_SUM_TOLERANCE = 1e-9


class Randomizer(Protocol):
    """What every randomizer offers: its published parameters and its local ε."""

    mechanism: ClassVar[str]

    @property
    def local_epsilon(self) -> float:
        """ε of the local mechanism (``math.inf`` when unbounded)."""

    def to_params(self) -> dict[str, Any]:
        """The published parameters, JSON-ready."""


def _json_domain(domain: Iterable) -> list:
    """A domain's values for JSON: a date or a time as its text ('2020-01-01 10:00:00'), as
    the catalogue declares them (``domain_codes`` reads that text back as the time)."""
    return [str(v) if isinstance(v, datetime.date) else v for v in domain]


def _check_probability(value: float, name: str) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise PrivacyParameterError(f"{name} must be in [0, 1], got {value!r}",
                                    hint=f"pass {name} as a probability, e.g. 0.5")
    return value


def _inverse_counts(observed: np.ndarray, total: np.ndarray | float, diagonal: float,
                    offsets: np.ndarray) -> np.ndarray:
    """Solve observed = diagonal·n + offsets·total for n (Sherman-Morrison, no matrix inverse).

    Valid for any channel M = diagonal·I + offsets·1ᵀ, which covers ERRPH (diagonal = p0,
    offsets = p_j) and Warner (diagonal = 2θ - 1, offsets = 1 - θ).
    """
    return (np.asarray(observed, dtype=float) - offsets * np.asarray(total, dtype=float)[..., None]
            ) / diagonal


@dataclass(frozen=True)
class ERRPH:
    """Extended randomized response with partial hiding for one categorical attribute.

    Attributes:
        domain: the public, ordered values of the attribute.
        p0: probability of releasing the true value.
        hide_probabilities: p_1..p_k, the probability of releasing a_j regardless of the input.

    Example:
        >>> m = ERRPH.uniform(["a", "b", "c", "d"], p0=0.5)
        >>> round(m.local_epsilon, 4)   # ln 5
        1.6094
    """

    domain: tuple
    p0: float
    hide_probabilities: tuple[float, ...]
    mechanism: ClassVar[str] = "errph"

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain", tuple(self.domain))
        object.__setattr__(self, "p0", _check_probability(self.p0, "p0"))
        hide = tuple(_check_probability(p, "hide probability") for p in self.hide_probabilities)
        object.__setattr__(self, "hide_probabilities", hide)
        if len(self.domain) < 2:
            raise ProgrammingError(f"ERRPH needs a domain of at least 2 values, got {self.domain}")
        if len(hide) != len(self.domain):
            raise PrivacyParameterError(
                f"ERRPH has {len(hide)} hide probabilities for a domain of {len(self.domain)}",
                hint="give one hide probability per domain value")
        if abs(self.p0 + sum(hide) - 1.0) > _SUM_TOLERANCE:
            raise PrivacyParameterError(
                f"p0 + sum of hide probabilities must be 1, got {self.p0 + sum(hide)!r}",
                hint="use ERRPH.uniform(domain, p0) for equal hide probabilities")

    @classmethod
    def uniform(cls, domain: Iterable, p0: float) -> ERRPH:
        """k-ary randomized response: p_1 = ... = p_k = (1 - p0) / k (the paper's default)."""
        domain = tuple(domain)
        p0 = _check_probability(p0, "p0")
        return cls(domain, p0, ((1.0 - p0) / len(domain),) * len(domain))

    @classmethod
    def from_epsilon(cls, domain: Iterable, epsilon: float) -> ERRPH:
        """The k-ary randomized response of local ε at most ``epsilon``.

        p0 = (e^ε − 1)/(e^ε + k − 1) is irrational; it is rounded DOWN to a multiple of
        2^-52 (so the float p0 is that rational exactly). The local ε, ln(1 + k·p0/(1 − p0)),
        grows with p0, so rounding down keeps the guarantee: ε is never exceeded, and falls
        short by about 2^-52 relative. e^ε itself is bounded below by a rational, math.exp
        stepped down two ulps (it is within one ulp of e^ε).

        Example:
            >>> m = ERRPH.from_epsilon(["a", "b", "c"], 1.0)
            >>> m.p0 < (math.e - 1) / (math.e + 2), (m.p0 * 2**52).is_integer()
            (True, True)
        """
        domain = tuple(domain)
        if not 0 <= epsilon < math.inf:  # ∞ asks to publish the true values, as p0 = 1 does
            raise PrivacyParameterError(f"epsilon must be a finite number ≥ 0, got {epsilon!r}",
                                        hint="pass a local ε such as 1")
        exp_low = Fraction(math.nextafter(math.nextafter(math.exp(min(epsilon, 700.0)), 0.0),
                                          0.0))
        p0 = max((exp_low - 1) / (exp_low + len(domain) - 1), Fraction(0))
        return cls.uniform(domain, math.floor(p0 * 2**52) / 2**52)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ERRPH:
        """Rebuild from ``to_params()`` output."""
        return cls(params["domain"], params["p0"], params["hide_probabilities"])

    def to_params(self) -> dict[str, Any]:
        """The published parameters, JSON-ready."""
        return {"mechanism": self.mechanism, "domain": _json_domain(self.domain), "p0": self.p0,
                "hide_probabilities": list(self.hide_probabilities),
                "local_epsilon": _json_epsilon(self.local_epsilon)}

    @property
    def local_epsilon(self) -> float:
        """max over x, x', y of ln P(y|x)/P(y|x') = ln(1 + p0 / min_j p_j)."""
        if self.p0 == 0.0:
            return 0.0
        smallest = min(self.hide_probabilities)
        return math.inf if smallest == 0.0 else math.log1p(self.p0 / smallest)

    def transition_matrix(self) -> np.ndarray:
        """M[y, x] = P(output a_y | input a_x) = p0·[x = y] + p_y (the paper's Table 1)."""
        k = len(self.domain)
        return self.p0 * np.eye(k) + np.asarray(self.hide_probabilities)[:, None]

    def randomize_codes(self, codes: np.ndarray, rng: RandomSource) -> np.ndarray:
        """Randomize domain indices, each independently and exactly.

        One draw per entry from {keep, a_1, …, a_k} with probabilities p0 and
        (1 − p0)·p_j / Σ p (exact rationals: p_j normalised, as the floats may miss a sum of
        1 − p0 by rounding), so the output is a_x with p0 + (1 − p0)·p_x/Σ p.
        """
        codes = np.asarray(codes)
        hide = [Fraction(p) for p in self.hide_probabilities]
        if self.p0 == 1.0 or sum(hide) == 0:  # p0 within rounding of 1 and nothing to hide to
            return codes.copy()
        p0 = Fraction(self.p0)
        table = Categorical([p0] + [(1 - p0) * p / sum(hide) for p in hide])
        drawn = _draw_array(table, rng, codes.shape)
        return np.where(drawn == 0, codes, drawn - 1)

    def estimate_counts(self, observed: np.ndarray, total: np.ndarray | float) -> np.ndarray:
        """Unbiased true counts from released counts (last axis = domain): (c_j - p_j·N) / p0.

        ``total`` is N for each row of ``observed`` (e.g. the class sizes). Estimates may be
        negative; the caller decides how to clamp them.
        """
        if self.p0 == 0.0:
            raise PrivacyParameterError("p0 = 0 releases no information; counts cannot be "
                                        "reconstructed", hint="use p0 > 0")
        return _inverse_counts(observed, total, self.p0, np.asarray(self.hide_probabilities))


@dataclass(frozen=True)
class Warner:
    """Warner's randomized response for a binary attribute: keep with θ, else flip.

    Example:
        >>> round(Warner(["no", "yes"], theta=0.75).local_epsilon, 4)   # ln 3
        1.0986
    """

    domain: tuple
    theta: float
    mechanism: ClassVar[str] = "warner"

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain", tuple(self.domain))
        object.__setattr__(self, "theta", _check_probability(self.theta, "theta"))
        if len(self.domain) != 2:
            raise ProgrammingError(
                f"the Warner model is binary; got a domain of {len(self.domain)} values",
                hint="use ERRPH (mechanism errph) for attributes with more than two values")

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Warner:
        """Rebuild from ``to_params()`` output."""
        return cls(params["domain"], params["theta"])

    def to_params(self) -> dict[str, Any]:
        """The published parameters, JSON-ready."""
        return {"mechanism": self.mechanism, "domain": _json_domain(self.domain),
                "theta": self.theta,
                "local_epsilon": _json_epsilon(self.local_epsilon)}

    @property
    def local_epsilon(self) -> float:
        """|ln(θ / (1 - θ))|; infinite at θ ∈ {0, 1}."""
        if self.theta in (0.0, 1.0):
            return math.inf
        return abs(math.log(self.theta / (1.0 - self.theta)))

    def transition_matrix(self) -> np.ndarray:
        """M[y, x] = θ on the diagonal, 1 - θ off it."""
        return np.array([[self.theta, 1 - self.theta], [1 - self.theta, self.theta]])

    def randomize_codes(self, codes: np.ndarray, rng: RandomSource) -> np.ndarray:
        """Randomize 0/1 indices: flip each with probability exactly 1 − θ."""
        codes = np.asarray(codes)
        theta = Fraction(self.theta)
        flip = _draw_array(Categorical([theta, 1 - theta]), rng, codes.shape)
        return np.where(flip == 0, codes, 1 - codes)

    def estimate_counts(self, observed: np.ndarray, total: np.ndarray | float) -> np.ndarray:
        """Unbiased true counts: (c_j - (1-θ)·N) / (2θ - 1); singular at θ = 0.5."""
        if self.theta == 0.5:
            raise PrivacyParameterError("theta = 0.5 releases no information; counts cannot be "
                                        "reconstructed", hint="use theta ≠ 0.5")
        return _inverse_counts(observed, total, 2 * self.theta - 1, np.full(2, 1 - self.theta))


@dataclass(frozen=True)
class TRRParameters:
    """The published side of TRR: empirical mean and population variance of the sets A and B.

    Reconstruction (paper §4.2, Eq. 2-3) of a group of n released values with mean ȳ and sample
    variance s²: μ̂ = (ȳ - b̄)/ā and the exactly unbiased variance
    S² = [s²·(1 + σ_A²/(n ā²)) - σ_A²·((ȳ - b̄)/ā)² - σ_B²] / (ā² + σ_A²)
    (the paper's Eq. 3 without the O(1/n) correction factor). S² may be negative for small
    groups; the caller floors it.
    """

    a_mean: float
    a_variance: float
    b_mean: float
    b_variance: float
    mechanism: ClassVar[str] = "trr"

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> TRRParameters:
        """Rebuild from ``to_params()`` output."""
        return cls(params["a_mean"], params["a_variance"], params["b_mean"], params["b_variance"])

    def to_params(self) -> dict[str, Any]:
        """The published parameters, JSON-ready."""
        return {"mechanism": self.mechanism, "a_mean": self.a_mean, "a_variance": self.a_variance,
                "b_mean": self.b_mean, "b_variance": self.b_variance, "local_epsilon": None}

    @property
    def local_epsilon(self) -> float:
        """Always infinite: the support of a·x + b over finite sets depends on x."""
        return math.inf

    def estimate_mean(self, released_mean: np.ndarray | float) -> np.ndarray:
        """μ̂ = (ȳ - b̄) / ā."""
        return (np.asarray(released_mean, dtype=float) - self.b_mean) / self.a_mean

    def estimate_variance(self, released_var_samp: np.ndarray | float,
                          released_mean: np.ndarray | float,
                          count: np.ndarray | float) -> np.ndarray:
        """Unbiased Var(x) from VAR_SAMP(y), AVG(y) and COUNT(y) of the released values."""
        s2 = np.asarray(released_var_samp, dtype=float)
        n = np.asarray(count, dtype=float)
        mu = self.estimate_mean(released_mean)
        a2, var_a = self.a_mean ** 2, self.a_variance
        return (s2 * (1 + var_a / (n * a2)) - var_a * mu ** 2 - self.b_variance) / (a2 + var_a)


@dataclass(frozen=True, eq=False)
class TRR:
    """Transforming randomized response: y = a·x + b, a ∈ A and b ∈ B drawn uniformly.

    The sets stay with whoever randomizes; only ``parameters`` is published.
    """

    a_set: np.ndarray
    b_set: np.ndarray
    mechanism: ClassVar[str] = "trr"

    @classmethod
    def draw(cls, rng: RandomSource, *, a_mean: float = 1.0, a_variance: float = 1.0,
             b_variance: float = 1.0, set_size: int = 1000) -> TRR:
        """Sets of ``set_size`` Gaussian numbers, B re-centred so that b̄ = 0 (paper §4.2).

        The numbers are ``RandomSource.normal`` draws (Box-Muller on the source's uniforms):
        TRR has no finite ε, so float rounding here weakens no guarantee.
        """
        check_trr(a_mean, a_variance, b_variance)
        if set_size < 1:
            raise PrivacyParameterError(f"TRR set size must be ≥ 1, got {set_size}")
        a_sd, b_sd = math.sqrt(a_variance), math.sqrt(b_variance)
        a_set = np.array([rng.normal(a_mean, a_sd) for _ in range(set_size)])
        b_set = np.array([rng.normal(0.0, b_sd) for _ in range(set_size)])
        trr = cls(a_set, b_set - b_set.mean())
        if abs(trr.parameters.a_mean) < 1e-6:
            raise PrivacyParameterError("the mean of TRR's set A is 0, so x cannot be recovered",
                                        hint="use a_mean away from 0 (the paper uses 1 or 2)")
        return trr

    @property
    def parameters(self) -> TRRParameters:
        """Empirical mean and population (1/m) variance of A and B, as the paper defines them."""
        return TRRParameters(float(self.a_set.mean()), float(self.a_set.var()),
                             float(self.b_set.mean()), float(self.b_set.var()))

    @property
    def local_epsilon(self) -> float:
        """Always infinite (see ``TRRParameters.local_epsilon``)."""
        return math.inf

    def to_params(self) -> dict[str, Any]:
        """The published parameters (not the sets)."""
        return self.parameters.to_params()

    def randomize_values(self, values: np.ndarray, rng: RandomSource) -> np.ndarray:
        """Fresh a and b for every value, each uniform over its set (``below``)."""
        values = np.asarray(values, dtype=float)
        a = self.a_set[_below_array(len(self.a_set), rng, values.shape)]
        b = self.b_set[_below_array(len(self.b_set), rng, values.shape)]
        return a * values + b


def check_trr(a_mean: float, a_variance: float, b_variance: float) -> None:
    """Refuse TRR parameters that publish the values: variances of 0 made every a the mean
    and every b 0, so y = x was written as a public table; NaN and ∞ hide nothing either.

    Raises:
        PrivacyParameterError: a variance is not a finite number > 0, or the mean is not finite.
    """
    for name, value, low in (("a-mean", a_mean, -math.inf), ("a-variance", a_variance, 0.0),
                             ("b-variance", b_variance, 0.0)):
        if not (math.isfinite(value) and value > low):
            bound = "finite" if low == -math.inf else "a finite number > 0"
            raise PrivacyParameterError(
                f"TRR's {name.replace('-', ' ')} must be {bound}, got {value!r}",
                hint=f"pass --trr-{name} as {bound}, e.g. 1 (the paper's)")


def _draw_array(table: Categorical, rng: RandomSource, shape: tuple[int, ...]) -> np.ndarray:
    """Independent draws of ``table`` as an integer array of ``shape`` (one per cell)."""
    size = math.prod(shape)
    return np.fromiter(table.draws(rng, size), dtype=np.int64, count=size).reshape(shape)


def _below_array(n: int, rng: RandomSource, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform integers of [0, n) as an array of ``shape``."""
    size = math.prod(shape)
    below = rng.below
    return np.fromiter((below(n) for _ in range(size)), dtype=np.int64,
                       count=size).reshape(shape)


CATEGORICAL = {"errph": ERRPH.uniform, "warner": lambda domain, p: Warner(domain, p)}
PUBLISHED = {"errph": ERRPH.from_params, "warner": Warner.from_params,
             "trr": TRRParameters.from_params}


def csprng() -> RandomSource:
    """The OS CSPRNG as a ``RandomSource`` (the default for every randomization)."""
    return RandomSource()


def _json_epsilon(epsilon: float) -> float | None:
    return None if math.isinf(epsilon) else epsilon


@dataclass(frozen=True)
class RandomizationSpec:
    """How to randomize a table: one categorical mechanism, TRR for numeric columns.

    Attributes:
        p: ERRPH's p0 (``categorical="errph"``) or Warner's θ (``"warner"``) for every
            categorical column, unless ``column_p`` overrides it.
        keep: columns copied in the clear (unprotected), e.g. the class label.
        trr_a_mean, trr_a_variance, trr_b_variance, trr_set_size: TRR's Gaussian sets.
    """

    p: float = 0.5
    categorical: str = "errph"
    column_p: Mapping[str, float] = field(default_factory=dict)
    keep: tuple[str, ...] = ()
    trr_a_mean: float = 1.0
    trr_a_variance: float = 1.0
    trr_b_variance: float = 1.0
    trr_set_size: int = 1000

    def __post_init__(self) -> None:
        # checked when the spec is made, before any true row is read (a p of 2 had been
        # refused by the mechanism, after the custodian's read was logged)
        _check_probability(self.p, "p")
        for column, p in self.column_p.items():
            _check_probability(p, f"p of column {column!r}")
        check_trr(self.trr_a_mean, self.trr_a_variance, self.trr_b_variance)

    def build(self, table: TableSpec, rng: RandomSource) -> dict[str, Randomizer]:
        """One randomizer per non-kept column of ``table``: categorical if it has ``values``."""
        if self.categorical not in CATEGORICAL:
            raise ProgrammingError(f"unknown categorical mechanism {self.categorical!r}",
                                   hint=f"use one of {sorted(CATEGORICAL)}")
        unknown = [c for c in [*self.keep, *self.column_p] if table.column(c) is None]
        if unknown:
            raise CatalogError(f"table {table.name!r} has no column(s) {unknown}",
                               hint=f"columns are {sorted(table.columns)}")
        kept = {c.lower() for c in self.keep}
        randomizers: dict[str, Randomizer] = {}
        for name, spec in table.columns.items():
            if name.lower() in kept or name == table.privacy_unit:
                continue  # the person's id is published only if kept (``published``)
            if spec.categories is not None:
                p = self.column_p.get(name, self.p)
                randomizer = CATEGORICAL[self.categorical](spec.categories, p)
                if math.isinf(randomizer.local_epsilon):
                    raise _publishes_true_values(name, randomizer.mechanism, p)
                randomizers[name] = randomizer
            elif spec.is_numeric:
                randomizers[name] = TRR.draw(rng, a_mean=self.trr_a_mean,
                                             a_variance=self.trr_a_variance,
                                             b_variance=self.trr_b_variance,
                                             set_size=self.trr_set_size)
            else:
                raise CatalogError(
                    f"table {table.name!r}, column {name!r} has no public domain to randomize over",
                    hint="declare its values: in the metadata, or keep it in the clear with --keep")
        return randomizers

    def published(self, table: TableSpec) -> list[str]:
        """The columns written: all but the privacy unit, unless it is kept in the clear (a
        person's records are then linked, which their local ε per person already counts)."""
        kept = {c.lower() for c in self.keep}
        return [c for c in table.columns
                if c != table.privacy_unit or c.lower() in kept]


def unit_bound(table: TableSpec) -> int | None:
    """The most records one person publishes, from the table's declared (public) contribution
    bounds: ``max_rows_per_unit`` if declared and smaller, else max_groups_per_unit ×
    max_rows_per_group (None without a privacy unit: each record is a person)."""
    if table.privacy_unit is None:
        return None
    bound = table.max_groups_per_unit * table.max_rows_per_group
    return bound if table.max_rows_per_unit is None else min(bound, table.max_rows_per_unit)


def bound_units(frame: pd.DataFrame, table: TableSpec,
                rng: RandomSource | None = None) -> tuple[pd.DataFrame, int]:
    """``frame`` with at most ``unit_bound(table)`` records per person, kept uniformly at
    random, and how many were dropped (an exact count, the custodian's only).

    Each record is randomized independently, so a person's local ε is their records times a
    record's; publishing at most the declared bound makes that a public number. Records without
    a person are dropped, as every answer of the engine drops them.
    """
    bound = unit_bound(table)
    if bound is None:
        return frame, 0
    rng = rng if rng is not None else csprng()
    unit = frame[table.column(table.privacy_unit).name]
    shuffled = unit.iloc[rng.sample(len(frame), len(frame))]
    rank = shuffled[shuffled.notna()].groupby(shuffled, sort=False).cumcount()
    kept = frame.loc[rank.index[rank.to_numpy() < bound]].sort_index()
    return kept, len(frame) - len(kept)


def _publishes_true_values(column: str, mechanism: str, p: float) -> PrivacyParameterError:
    """The refusal of a categorical randomizer with no finite local ε."""
    parameter = "theta" if mechanism == "warner" else "p0"
    return PrivacyParameterError(
        f"{mechanism} with {parameter} = {p:g} on column {column!r} has an infinite local ε: "
        "it publishes the true values (or their mirror image) as a public table",
        hint=f"use a {parameter} strictly between 0 and 1 (e.g. 0.5); to publish a column in "
        "the clear on purpose, dpsql randomize takes --keep COLUMN (keep=)")


def randomize_frame(frame: pd.DataFrame, randomizers: Mapping[str, Randomizer],
                    rng: RandomSource | None = None) -> pd.DataFrame:
    """A copy of ``frame`` with each column in ``randomizers`` randomized independently.

    A categorical column's missing value, or one outside its declared domain, is randomized
    as a value drawn uniformly from the domain: its record's output is then a mixture of the
    randomizer's outputs for domain values, within its local ε. Refused, one person's NULL
    published D and refused D′, the refusal naming the value (adversary round L). TRR has no
    finite ε: a missing value stays missing.

    Raises:
        DataError: the frame lacks a randomized column.
    """
    rng = rng if rng is not None else csprng()
    out = frame.copy()
    for column, randomizer in randomizers.items():
        if column not in frame.columns:
            raise DataError(f"the data have no column {column!r}",
                            hint=f"columns are {list(frame.columns)}")
        values = frame[column]
        if isinstance(randomizer, TRR):
            out[column] = randomizer.randomize_values(values.to_numpy(dtype=float), rng)
            continue
        codes = _domain_codes(values, randomizer.domain, rng)
        out[column] = pd.Series(np.asarray(randomizer.domain, dtype=object)[
            randomizer.randomize_codes(codes, rng)], index=frame.index)
    return out


def _domain_codes(values: pd.Series, domain: tuple, rng: RandomSource) -> np.ndarray:
    """Each value's index in ``domain`` (``domain_codes``); a missing one's or one outside it
    drawn uniformly."""
    codes = domain_codes(values, domain)
    outside = codes < 0
    codes[outside] = _below_array(len(domain), rng, (int(outside.sum()),))
    return codes


def domain_codes(values: pd.Series | Iterable, domain: Sequence) -> np.ndarray:
    """Each value's index in ``domain`` as int64, -1 for a missing value or one outside it.

    Each value is compared by itself (``_comparable``), never through its column's text:
    pandas formats a column from all its values, so one person's NULL (an int column read as
    floats: '1.0') or one timestamp past midnight (dates written in full) changed how every
    other record matched the domain (adversary round M: the share of others published with
    their true value 0.929 on D, 0.346 on D′). Numbers match by value (1.0 as 1), times as
    timestamps, and a declared text value also by the number or time it spells.

    Example:
        >>> domain_codes(pd.Series([1, None, 3, 7]), ["1", "2", "3"]).tolist()
        [0, -1, 2, -1]
    """
    index: dict[Any, int] = {}
    for code, value in enumerate(domain):
        for key in _domain_keys(value):
            index.setdefault(key, code)
    # each distinct value is looked up once (a column holds few); factorize groups values that
    # are equal, which _comparable maps to equal keys, and sets its missing ones to -1
    rows, distinct = pd.factorize(values if isinstance(values, pd.Series)
                                  else pd.Series(list(values), dtype=object))
    found = np.fromiter((index.get(_comparable(v), -1) for v in distinct), dtype=np.int64,
                        count=len(distinct))
    return np.append(found, -1)[rows]  # row -1 (missing) reads the appended -1


def _comparable(value: Any) -> Any:
    """A value as domains are looked up: numbers by their value (1.0 as 1), times as
    ``pd.Timestamp``, text as it is; None for a missing one."""
    if value is None or value is pd.NaT or value is pd.NA or (
            isinstance(value, float | np.floating) and math.isnan(value)):
        return None
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return int(value) if float(value).is_integer() else float(value)
    if isinstance(value, datetime.date | np.datetime64):
        return pd.Timestamp(value)
    return value


def _domain_keys(value: Any) -> list[Any]:
    """The keys a declared value matches: itself, and a text value's number or time (a
    domain declared as ['2', '4'] matches a column read as integers, one of
    '2020-01-01 00:00:00' a timestamp column)."""
    keys = [_comparable(value)]
    if isinstance(value, str):
        for parse in (float, pd.Timestamp):
            try:
                keys.append(_comparable(parse(value)))
            except (ValueError, OverflowError):
                pass
    return [key for key in keys if key is not None]  # 'nan' is no missing value's


@dataclass(frozen=True)
class RandomizedTable:
    """Where a randomized table was written and what protects it."""

    table: str
    data_path: Path
    metadata_path: Path
    parameters_path: Path
    randomizers: Mapping[str, Randomizer]
    clear_columns: tuple[str, ...]
    rows: int
    rows_per_unit: int | None = None  # the public bound on a person's records (None: rows)
    rows_dropped: int = 0  # beyond the bound: exact, for the custodian, never published

    @property
    def local_epsilon_per_unit(self) -> float | None:
        """A person's local ε: their at most ``rows_per_unit`` records' losses add up (None:
        row privacy)."""
        if self.rows_per_unit is None:
            return None
        return self.rows_per_unit * self.local_epsilon_per_record

    @property
    def local_epsilon_per_attribute(self) -> dict[str, float]:
        """Local ε of each randomized column (``math.inf`` for TRR)."""
        return {c: r.local_epsilon for c, r in self.randomizers.items()}

    @property
    def local_epsilon_per_record(self) -> float:
        """Sum over the randomized columns (independent coins: basic composition is tight)."""
        return float(sum(self.local_epsilon_per_attribute.values()))

    @property
    def local_epsilon_categorical(self) -> float:
        """Sum over the categorical (ERRPH/Warner) columns only, leaving TRR columns out."""
        return float(sum(r.local_epsilon for r in self.randomizers.values()
                         if not isinstance(r, TRR)))


def write_randomized(frame: pd.DataFrame, table: TableSpec, randomizers: Mapping[str, Randomizer],
                     output: str | Path, rows_dropped: int = 0) -> RandomizedTable:
    """Write randomized data (the columns of ``table`` that ``frame`` holds), a public
    catalogue YAML and the parameters sidecar JSON. ``frame`` holds at most
    ``unit_bound(table)`` records per person (``bound_units``, which counts ``rows_dropped``),
    so a person's local ε is that public bound times a record's.

    The YAML is ``<output stem>.yaml`` and the sidecar ``<output stem>.randomization.json``,
    both beside ``output`` (``.parquet`` or ``.csv``).
    """
    output = Path(output).resolve()
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        raise ProgrammingError(f"cannot write {output.name!r}: unknown format",
                               hint=f"end the output name with one of {OUTPUT_SUFFIXES}")
    columns = [c for c in table.columns if c in frame.columns]
    clear = tuple(c for c in columns if c not in randomizers)
    output.parent.mkdir(parents=True, exist_ok=True)
    write_data(frame[columns], output)
    result = RandomizedTable(
        table=table.name, data_path=output, metadata_path=output.with_suffix(".yaml"),
        parameters_path=output.with_suffix(".randomization.json"),
        randomizers=dict(randomizers), clear_columns=clear, rows=len(frame),
        rows_per_unit=unit_bound(table), rows_dropped=rows_dropped)
    result.parameters_path.write_text(json.dumps(_parameters_document(result), indent=2) + "\n")
    result.metadata_path.write_text(yaml.safe_dump(_catalogue_document(result, table),
                                                   sort_keys=False, allow_unicode=True))
    return result


def write_data(frame: pd.DataFrame, output: str | Path) -> None:
    """Write a frame as Parquet or CSV (with a header), chosen by the file suffix."""
    output = Path(output)
    fmt = "PARQUET" if output.suffix.lower() == ".parquet" else "CSV, HEADER"
    with duckdb.connect() as con:
        con.register("frame", frame)
        con.execute(f"COPY frame TO '{_sql_string(str(output))}' (FORMAT {fmt})")


def _sql_string(text: str) -> str:
    return text.replace("'", "''")


def _parameters_document(result: RandomizedTable) -> dict[str, Any]:
    per_record = result.local_epsilon_per_record
    return {
        "format": PARAMETERS_FORMAT,
        "table": result.table,
        "data": result.data_path.name,
        "rows": result.rows,
        "clear_columns": list(result.clear_columns),
        "columns": {c: r.to_params() for c, r in result.randomizers.items()},
        "local_epsilon": {
            "per_record": _json_epsilon(per_record),
            "per_record_categorical": _json_epsilon(result.local_epsilon_categorical),
            "records_per_unit_bound": result.rows_per_unit,
            "per_unit": None if result.local_epsilon_per_unit is None else
            _json_epsilon(result.local_epsilon_per_unit),
            "note": "sums over randomized columns; null means infinite (TRR columns, or p0 = 1); "
                    "clear columns are not protected; per_unit is per_record times the "
                    "declared bound on a person's records, beyond which they were dropped",
        },
    }


def _catalogue_document(result: RandomizedTable, table: TableSpec) -> dict[str, Any]:
    columns: dict[str, Any] = {}
    written = {*result.randomizers, *result.clear_columns}
    for name, spec in table.columns.items():
        if name not in written:
            continue
        if isinstance(result.randomizers.get(name), TRR):
            columns[name] = {"type": "float"}  # a·x + b leaves the declared bounds
        else:
            columns[name] = column_document(spec)
    epsilon = result.local_epsilon_per_record
    return {
        "name": f"{table.name}_randomized",
        "tables": {
            table.name: {
                "source": result.data_path.name,
                "public": True,
                "description": (
                    f"Locally randomized copy of {table.name!r} (dpsql randomize): output of a "
                    f"local-DP mechanism, so exact queries are post-processing. Local ε per "
                    f"record: {'infinite (TRR)' if math.isinf(epsilon) else f'{epsilon:.4f}'}. "
                    f"Clear, unprotected columns: {list(result.clear_columns)}. Parameters: "
                    f"{result.parameters_path.name}."),
                "rows": result.rows,
                "columns": columns,
            }
        },
    }


def column_document(spec: ColumnSpec) -> dict[str, Any]:
    """A declared column as the catalogue YAML mapping it was read from."""
    doc: dict[str, Any] = {"type": spec.type}
    if spec.is_bounded:
        doc.update(lower=spec.lower, upper=spec.upper)
    if spec.values is not None:
        doc["values"] = list(spec.values)
    return doc


@dataclass(frozen=True)
class RandomizationRecord:
    """The published parameters of a randomized table, read back from its sidecar JSON."""

    table: str
    rows: int
    clear_columns: tuple[str, ...]
    randomizers: dict[str, Randomizer]

    @property
    def local_epsilon_per_record(self) -> float:
        """Sum of the per-column local ε (``math.inf`` if any column is TRR)."""
        return float(sum(r.local_epsilon for r in self.randomizers.values()))


def load_randomization(path: str | Path) -> RandomizationRecord:
    """Read a ``*.randomization.json`` sidecar written by ``write_randomized``.

    Raises:
        CatalogError: the file is missing or not a dpsql randomization sidecar.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise CatalogError(f"cannot read randomization parameters {str(path)!r}: {err}",
                           hint="pass the .randomization.json written by dpsql randomize") from err
    if doc.get("format") != PARAMETERS_FORMAT:
        raise CatalogError(f"{str(path)!r} is not a {PARAMETERS_FORMAT} file")
    randomizers = {c: PUBLISHED[p["mechanism"]](p) for c, p in doc["columns"].items()}
    return RandomizationRecord(doc["table"], int(doc["rows"]), tuple(doc["clear_columns"]),
                               randomizers)


def randomize_table(metadata: str | Path | Mapping, table: str, output: str | Path,
                    spec: RandomizationSpec, *, rng: RandomSource | None = None,
                    database: str | Path | None = None, source: str | Path | None = None,
                    ledger: str | Path | None = None) -> RandomizedTable:
    """Randomize a catalogue table (or ``source``, a CSV/Parquet file with its columns).

    Args:
        metadata: catalogue YAML path or dict that declares ``table`` and its domains.
        table: the table to randomize.
        output: ``.parquet`` or ``.csv`` path of the randomized data.
        spec: mechanisms and parameters.
        rng: random source; default the CSPRNG (``RandomSource(insecure_seed=…)`` only in
            experiments).
        database: DuckDB file holding the table, if its source is a table name.
        source: read this file instead of the table's declared source.
        ledger: where the custodian's read of the true rows is logged.
    """
    rng = rng if rng is not None else csprng()
    catalog = load_catalog(metadata)
    table_spec = _table(catalog, table)
    randomizers = spec.build(table_spec, rng)  # refused parameters read no true row
    frame = read_source(catalog, table, database=database, source=source, ledger=ledger)
    frame, dropped = bound_units(frame, table_spec, rng)
    # publish the records in a random order: the source's order (a file sorted by a private
    # column) is not the randomizers' output and told each record's true value
    frame = frame.iloc[rng.sample(len(frame), len(frame))].reset_index(drop=True)
    frame = frame[spec.published(table_spec)]
    return write_randomized(randomize_frame(frame, randomizers, rng), table_spec, randomizers,
                            output, dropped)


def read_source(metadata: str | Path | Mapping | Catalog, table: str, *,
                database: str | Path | None = None, source: str | Path | None = None,
                analyst: str | None = None, ledger: str | Path | None = None) -> pd.DataFrame:
    """All rows of a catalogue table, read exactly through a custodian connection.

    The read is the custodian's (it is written to the ledger as a non-private access), cast
    to the declared column types; an int column holding a NULL keeps Python ints
    (``_exact_column``), never floats.

    Args:
        source: read this CSV/Parquet file (same columns) instead of the declared source.
        ledger: ledger path (``":memory:"`` in experiments); default as ``connect_custodian``.
    """
    catalog = load_catalog(metadata)
    spec = _table(catalog, table)
    if source is not None:
        spec = dataclasses.replace(spec, source=str(Path(source).resolve()))
        catalog = dataclasses.replace(catalog, tables={**catalog.tables, spec.name: spec})
    connection = connect_custodian(None if database is None else str(database),
                                   metadata=catalog, analyst=analyst, ledger=ledger)
    try:
        columns = ", ".join(_quote(c) for c in spec.columns)
        rows = connection.cursor().execute(
            f"SELECT {columns} FROM {_quote(spec.name)}").fetchall()
    finally:
        connection.close()
    return pd.DataFrame({name: _exact_column([row[i] for row in rows], column.type)
                         for i, (name, column) in enumerate(spec.columns.items())})


def _exact_column(values: list, kind: str) -> pd.Series:
    """A column as read: an int column holding a NULL as Python ints (object), never as
    floats, which rounded every value past 2^53 when one person's value was NULL (adversary
    round S: 64-bit person ids merged, 300 published records became 2)."""
    exact = kind == "int" and any(v is None for v in values)
    return pd.Series(values, dtype=object if exact else None)


def _table(catalog: Catalog, name: str) -> TableSpec:
    spec = catalog.table(name)
    if spec is None:
        raise CatalogError(f"the metadata declares no table {name!r}",
                           hint=f"tables are {sorted(catalog.tables)}")
    return spec


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _parse_column_p(pairs: Iterable[str]) -> dict[str, float]:
    parsed = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        try:
            parsed[name] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise click.BadParameter(f"expected COLUMN=P, got {pair!r}",
                                     param_hint="--column-p")
    return parsed


@click.command("randomize")
@click.option("--metadata", "-m", required=True, type=METADATA_FILE,
              help="Catalogue YAML that declares the table and its public domains.")
@click.option("--table", required=True, help="Table to randomize.")
@click.option("--output", required=True, type=click.Path(dir_okay=False),
              help="Randomized data (.parquet or .csv); the YAML and JSON go beside it.")
@click.option("--db", "database", type=click.Path(dir_okay=False), default=None,
              help="DuckDB file holding the table, if its source is a table name.")
@click.option("--ledger", default=None,
              help="Ledger that logs the custodian's read of the true rows.")
@click.option("--input", "source",
              type=ExistingFile("input file", "pass --input with the path of a CSV or Parquet "
                                "file, or leave it out to read the table's declared source"),
              help="Read this CSV/Parquet file instead of the table's declared source.")
@click.option("--mechanism", type=click.Choice(sorted(CATEGORICAL)), default="errph",
              show_default=True, help="Randomizer for categorical columns.")
@click.option("--p0", type=float, default=0.5, show_default=True,
              help="ERRPH: probability of releasing the true value.")
@click.option("--theta", type=float, default=None,
              help="Warner: probability of releasing the true value (needs --mechanism warner).")
@click.option("--column-p", multiple=True, metavar="COLUMN=P",
              help="Per-column p0 (or θ) overriding --p0/--theta (repeatable).")
@click.option("--keep", multiple=True, help="Column copied in the clear, unprotected (repeatable).")
@click.option("--trr-a-mean", type=float, default=1.0, show_default=True)
@click.option("--trr-a-variance", type=float, default=1.0, show_default=True)
@click.option("--trr-b-variance", type=float, default=1.0, show_default=True)
@click.option("--trr-set-size", type=int, default=1000, show_default=True)
@click.option("--insecure-seed", type=int, default=None,
              help="Reproducible randomization for experiments: NO privacy.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def command(metadata: str, table: str, output: str, database: str | None, ledger: str | None,
            source: str | None, mechanism: str, p0: float, theta: float | None,
            column_p: tuple[str, ...], keep: tuple[str, ...], trr_a_mean: float,
            trr_a_variance: float, trr_b_variance: float, trr_set_size: int,
            insecure_seed: int | None, as_json: bool) -> None:
    """Randomize a table column by column (local DP) and write it with its parameters."""
    if mechanism == "warner" and theta is None:
        raise PrivacyParameterError("--mechanism warner needs --theta",
                                    hint="pass --theta P, the probability of releasing the true "
                                    "value, e.g. --theta 0.75")
    if theta is not None and mechanism != "warner":
        raise PrivacyParameterError(f"--theta is the Warner model's parameter, not {mechanism}'s",
                                    hint="add --mechanism warner, or give ERRPH's --p0 instead")
    # a seeded source warns (InsecureRandomnessWarning): reproducible, NO privacy
    rng = csprng() if insecure_seed is None else RandomSource(insecure_seed=insecure_seed)
    spec = RandomizationSpec(p=p0 if theta is None else theta, categorical=mechanism,
                             column_p=_parse_column_p(column_p),
                             keep=tuple(keep), trr_a_mean=trr_a_mean,
                             trr_a_variance=trr_a_variance, trr_b_variance=trr_b_variance,
                             trr_set_size=trr_set_size)
    result = randomize_table(metadata, table, output, spec, rng=rng, database=database,
                             source=source, ledger=ledger)
    summary = {
        "table": result.table, "rows": result.rows, "data": str(result.data_path),
        "metadata": str(result.metadata_path), "parameters": str(result.parameters_path),
        "clear_columns": list(result.clear_columns),
        "local_epsilon_per_attribute": {c: _json_epsilon(e) for c, e in
                                        result.local_epsilon_per_attribute.items()},
        "local_epsilon": _json_epsilon(result.local_epsilon_per_record),
        "records_per_unit_bound": result.rows_per_unit,
        "local_epsilon_per_unit": None if result.local_epsilon_per_unit is None else
        _json_epsilon(result.local_epsilon_per_unit),
        "epsilon_spent": 0,  # no central budget: the output is a local-DP release
        "exact (non-private, for the custodian)": {"rows_dropped": result.rows_dropped},
    }
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(f"randomized {result.rows} rows of {result.table!r} -> {result.data_path}")
    click.echo(f"metadata: {result.metadata_path}\nparameters: {result.parameters_path}")
    for column, epsilon in result.local_epsilon_per_attribute.items():
        click.echo(f"  {column}: local ε = {epsilon:.4f}")
    click.echo(f"local ε per record: {result.local_epsilon_per_record:.4f} "
               f"(clear, unprotected: {', '.join(result.clear_columns) or 'none'})")
    if result.local_epsilon_per_unit is not None:
        click.echo(f"local ε per person: {result.local_epsilon_per_unit:.4f} (at most "
                   f"{result.rows_per_unit} records each, the declared bound, each randomized "
                   "independently)")
        click.echo(f"rows dropped beyond that bound: {result.rows_dropped} (exact, for the "
                   "custodian: not published)")
