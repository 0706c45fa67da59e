"""Neighbour-differential checks: one statement on D and on D′ = D plus one adversarial person.

A test on one database cannot see a privacy bug; a pair of neighbouring databases can. For a
statement the contract is:

- refused on both with the same ``dpsql.Error`` class and nothing charged on either ledger; or
- answered on both, and for every noised part the exact values move between D and D′ by at
  most the part's reported sensitivity (L1 over the cells; L2 too for the Gaussian mechanism);
  a statement whose counts and sums are charged as a FILTER partition (one share for all its
  classes) loses at most that share: the person's rows, as the moved parts show them, fill
  at most one class in all (``check_partition``);
  a statement that reads only public tables is answered identically on both and never shows a
  private value;
- never answered on one and failed on the other, never a ``dpsql.InternalError`` and never an
  exception outside ``dpsql.Error``.

The adversarial person is appended at the END of each private table, so no other row moves.
Both connections of a pair plan every statement from the same seeded random source, so the
per-query hash salts (which persons' groups are kept) agree on D and D′.
"""

from __future__ import annotations

import csv
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
from conftest import DAYS, REGIONS, catalogue, join_tables, make_adult, make_visits

import dpsql
from dpsql.mechanisms.samplers import RandomSource
from dpsql.release import filter_partition
from dpsql.sensitivity import partitioned_loss

TARGET = 42  # the adversarial person's uid: absent from D (its uids are 0..PEOPLE-1)
PEOPLE = 40
BIG, SMALL = 9223372036854775807, -9223372036854775808
LONG_TEXT = "adversary-" + "x" * 3000  # a public answer must never show it
NULL = "NULL"  # the CSV spelling of NULL ('' stays an empty string)
FLOATS = ["1e20", "-1e20", "inf", "-inf", "nan", None]
INTS = [str(BIG), str(SMALL), None]
# numbers after or before a Unicode space, which a regex's \s skips and PostgreSQL's number
# input does not: a cast guard that read "\u2003" "5" as a number failed on D′ only
SPACED_NUMBERS = ["\u2003" "5", "5" "\u3000", "\u00a0" "5", "\u1680" "5", "\ufeff" "5"]
TEXTS = ["abc", "", LONG_TEXT, *SPACED_NUMBERS, None]
ITEMS = ["a", "b", "c"]
# dates the backends store but their date functions fail on or answer with sentinels
DATES = ["infinity", "-infinity", "294247-01-10", "5877642-06-25 (BC)", "0001-01-01",
         "9999-12-31", None]
TIMES = ["infinity", "-infinity", "294247-01-10 04:00:54", "290309-12-22 (BC) 00:00:00",
         "9999-12-31 23:59:59.999999", None]
DATE_BOUNDS = ("2000-01-01", "2001-12-31")
SHOPS = ["corner", "market", "online"]
# private date and timestamp keys (with a δ): the exact query returns the keys themselves,
# which PostgreSQL's driver could not read at ±infinity or past year 9999 (D answered, D′
# failed) and DuckDB's returned clipped, two cells with one key
TEMPORAL_KEYS = ["SELECT ts, COUNT(*) AS n FROM events GROUP BY ts",
                 "SELECT d, COUNT(DISTINCT uid) AS n, SUM(x) AS s FROM events GROUP BY d",
                 "SELECT CAST(ts AS DATE) AS k, COUNT(*) AS n FROM events GROUP BY k",
                 "SELECT d + 1 AS k, MEDIAN(x) AS m FROM events GROUP BY k"]
VARIANTS = 3  # adversarial persons; the fuzz picks one per statement, the attack tests use all
EPSILON = 1
TOLERANCE = Fraction(1, 10**9)
DATA = "@DATA@"  # in a statement: the folder of the database it runs on (a path to its files)


def base_tables() -> dict[str, pd.DataFrame]:
    """D: small adult, visits, purchases, events (uids 0..PEOPLE-1) and regions (each id
    twice)."""
    rng = np.random.default_rng(5)
    purchases = pd.DataFrame({"uid": rng.integers(0, PEOPLE, 150),
                              "item": rng.choice(ITEMS, 150), "shop": rng.choice(SHOPS, 150),
                              "price": rng.uniform(0, 50, 150).round(2)})
    regions = pd.DataFrame({"region_id": np.repeat(range(5), 2), "name": np.repeat(REGIONS, 2)})
    days = pd.to_datetime(DATE_BOUNDS[0]) + pd.to_timedelta(rng.integers(0, 730, 120), "D")
    events = pd.DataFrame({"uid": rng.integers(0, PEOPLE, 120), "d": days.strftime("%Y-%m-%d"),
                           "ts": (days + pd.to_timedelta(rng.integers(0, 86400, 120), "s"))
                           .strftime("%Y-%m-%d %H:%M:%S"),
                           "x": rng.uniform(0, 10, 120).round(2)})
    return {"adult": make_adult(200), "visits": make_visits(PEOPLE), "purchases": purchases,
            "regions": regions, "events": events}


def _cycled(values: list, rows: int) -> list:
    return [values[i % len(values)] for i in range(rows)]


def refused_uncharged(con, sql: str, error: type) -> Exception:
    """The ``error`` that refuses ``sql`` on ``con``, after checking that it spent nothing
    (neither the error's ``epsilon_spent`` nor the connection's budget moved)."""
    import pytest

    spent = con.budget_spent
    with pytest.raises(error) as caught:
        con.execute(sql, epsilon=1)
    assert caught.value.epsilon_spent == 0 and con.budget_spent == spent, sql
    return caught.value


def heavy_in_every_region() -> dict[str, pd.DataFrame]:
    """A person with 600 visits at the upper bound, joined to every public region, to ids
    the public table lacks (5-9) and to none (NULL): the adversary of statements that read
    a public table's rows (joint domains, a public column's bounds)."""
    regions = [*map(str, range(10)), None]
    return {"visits": pd.DataFrame({
        "uid": [str(TARGET)] * 600, "day": _cycled(DAYS, 600), "amount": ["100"] * 600,
        "region_id": _cycled(regions, 600)}, dtype=object)}


def adversary(variant: int) -> dict[str, pd.DataFrame]:
    """One adversarial person: hundreds of rows over every key, at and beyond every bound.

    0: in bounds but heavy (every key value, values at the upper bounds);
    1: extreme values of each declared type (±1e20, ±inf, NaN, BIGINT limits, texts that
       break casts) and NULLs, uid 42;
    2: the same mixed with NULL-heavy rows, under the uid SMALL (the smallest BIGINT).
    Visits, purchases and events cycle through value lists of coprime lengths, so every
    combination of key values appears; events' extreme dates are ±infinity and the years
    past 9999 and before 1 that the backends store.
    """
    if variant == 0:
        adult = {"age": ["90"], "hours": ["99"], "education": ["Doctorate"], "sex": ["Male"],
                 "salary": [">50K"]}
        days, regions, amounts = DAYS, ["0", "1", "2", "3", "4"], ["100"]
        items, shops, prices, uid = ITEMS, ["rogue"], ["50"], TARGET
        dates, times = list(DATE_BOUNDS), [f"{DATE_BOUNDS[1]} 23:59:59"]
    elif variant == 1:
        adult = {"age": [str(BIG)], "hours": [str(SMALL)], "education": [LONG_TEXT],
                 "sex": [""], "salary": ["abc"]}
        days, regions = [*DAYS, *TEXTS], ["0", "1", "2", "3", "4", *INTS]
        amounts, prices = [*FLOATS, "100", "0"], [*FLOATS, "50"]
        items, shops, uid = [*ITEMS, *TEXTS], [*TEXTS, "rogue"], TARGET
        dates, times = DATES, TIMES
    else:
        adult = {"age": [None], "hours": [str(BIG)], "education": ["abc"], "sex": [None],
                 "salary": [LONG_TEXT]}
        days, regions = [None, *DAYS, "abc"], [None, str(SMALL), "0", "4", str(BIG)]
        amounts, prices = [None, "nan", "inf", "-1e20", "1e20", "-inf", "100"], [None, "nan"]
        items, shops, uid = [None, *ITEMS, ""], [None, LONG_TEXT], SMALL
        dates, times = [None, "infinity", DATE_BOUNDS[0]], [None, "-infinity"]
    visits, purchases = 700, 330
    return {
        "adult": pd.DataFrame(adult, dtype=object),
        "visits": pd.DataFrame({"uid": [str(uid)] * visits, "day": _cycled(days, visits),
                                "amount": _cycled(amounts, visits),
                                "region_id": _cycled(regions, visits)}, dtype=object),
        "purchases": pd.DataFrame({"uid": [str(uid)] * purchases,
                                   "item": _cycled(items, purchases),
                                   "shop": _cycled(shops, purchases),
                                   "price": _cycled(prices, purchases)}, dtype=object),
        "events": pd.DataFrame({"uid": [str(uid)] * purchases, "d": _cycled(dates, purchases),
                                "ts": _cycled(times, purchases),
                                "x": _cycled(prices, purchases)}, dtype=object),
    }


def with_rows(tables: dict[str, pd.DataFrame], extra: dict[str, pd.DataFrame]
              ) -> dict[str, pd.DataFrame]:
    """``tables`` with the ``extra`` rows appended at the end of their tables."""
    return {name: pd.concat([frame.astype(object), extra[name]], ignore_index=True)
            if name in extra else frame for name, frame in tables.items()}


def metadata(folder: Path, *, neighbouring: str = "add_remove", mechanism: str = "laplace",
             visits: dict | None = None, adult: dict | None = None,
             **purchase_columns) -> dict:
    """The test catalogue over ``folder``: adult, visits, public regions, private purchases
    and events (a date d and a timestamp ts in 2000-2001, x in [0, 10]).

    purchases.shop is text without public values (a private group key); NULL is spelled NULL
    in the CSV files, so an empty string stays a value. ``visits`` overrides keys of the
    visits table (its bounds), ``adult`` columns of the adult table.
    """
    meta = catalogue(folder, neighbouring, budget=1e15)
    meta["tables"]["visits"].update(visits or {})
    meta["tables"]["adult"]["columns"].update(adult or {})
    meta["budget"]["delta"] = 0.5
    meta["mechanism"] = mechanism
    meta["tables"].update(join_tables(folder, shop={"type": "text"}, **purchase_columns))
    low, high = DATE_BOUNDS
    meta["tables"]["events"] = {
        "source": str(folder / "events.csv"), "privacy_unit": "uid",
        "max_groups_per_unit": 2, "max_rows_per_group": 2,
        "columns": {"uid": "int", "d": {"type": "date", "lower": low, "upper": high},
                    "ts": {"type": "timestamp", "lower": f"{low} 00:00:00",
                           "upper": f"{high} 23:59:59"},
                    "x": {"type": "float", "lower": 0, "upper": 10}}}
    for table in meta["tables"].values():
        table["csv"] = {"null": NULL}
    return meta


def write_database(folder: Path, tables: dict[str, pd.DataFrame]) -> None:
    """One CSV file per table, quoting text so that '' and NULL stay apart."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(folder / f"{name}.csv", index=False, na_rep=NULL,
                     quoting=csv.QUOTE_NONNUMERIC)


@dataclass
class Pair:
    """Analyst connections on D and D′ that plan every statement from the same seed."""

    d: dpsql.Connection
    d_prime: dpsql.Connection
    folders: tuple[Path, Path]  # where the CSV files of D and D′ are
    seed: int = 11

    @property
    def sides(self) -> tuple[tuple[dpsql.Connection, Path], ...]:
        """(connection, data folder) of D then D′."""
        return (self.d, self.folders[0]), (self.d_prime, self.folders[1])

    def __repr__(self) -> str:
        return f"Pair({self.folders[0].parent})"

    def close(self) -> None:
        """Close both connections."""
        self.d.close()
        self.d_prime.close()


def open_pair(root: Path, d_tables: dict, d_prime_tables: dict, *, target=None,
              **meta_options) -> Pair:
    """Connections on two databases given as tables, with the same catalogue options;
    ``target`` is what dpsql.connect opens them with (None: DuckDB; a SparkSession reads the
    same CSV files)."""
    connections = []
    for name, tables in (("d", d_tables), ("d_prime", d_prime_tables)):
        write_database(root / name, tables)
        connections.append(dpsql.connect(target, metadata=metadata(root / name, **meta_options),
                                         ledger=root / f"{name}.sqlite", insecure_seed=11))
    return Pair(*connections, folders=(root / "d", root / "d_prime"))


def open_neighbours(root: Path, variant: int, *, target=None, **meta_options) -> Pair:
    """D (base_tables) and D′ = D plus the adversarial person ``variant``."""
    base = base_tables()
    return open_pair(root / f"variant{variant}", base, with_rows(base, adversary(variant)),
                     target=target, **meta_options)


def every_neighbour(root: Path, extra: dict[str, pd.DataFrame] | None = None,
                    **meta_options) -> Iterator[list[Pair]]:
    """One (D, D′) pair per adversarial person, and one more for ``extra`` (a test's own
    adversary's rows) when given, with the same catalogue options (``metadata``), closed when
    the generator ends (a fixture's body)."""
    opened = [open_neighbours(root, variant, **meta_options) for variant in range(VARIANTS)]
    if extra is not None:
        base = base_tables()
        opened.append(open_pair(root / "extra", base, with_rows(base, extra), **meta_options))
    try:
        yield opened
    finally:
        for pair in opened:
            pair.close()


# catalogue options a new shape is checked under too: a cap R on each person's rows in all,
# the Gaussian mechanism (its L2 bound; it needs a δ) and replace neighbours
OPTIONS = [{"visits": {"max_rows_per_unit": 3}}, {"mechanism": "gaussian"},
           {"neighbouring": "replace"}]


def released_under(root: Path, extra: dict[str, pd.DataFrame], options: dict,
                   statements: list[str]) -> None:
    """Each of ``statements`` released on D and on D′ = D plus ``extra``, under the catalogue
    ``options`` (one of ``OPTIONS``), with the contract of ``check_statement``."""
    base = base_tables()
    pair = open_pair(root, base, with_rows(base, extra), **options)
    delta = 1e-6 if "mechanism" in options else None
    try:
        for sql in statements:
            assert check_statement(pair, sql, delta=delta) == "released", sql
    finally:
        pair.close()


def variant_of(sql: str) -> int:
    """The adversarial person a statement is fuzzed against (stable across runs)."""
    return zlib.crc32(sql.encode()) % VARIANTS


# ---- one statement on both sides ------------------------------------------------------------

def _reseed(con: dpsql.Connection, seed: int, *, store_answers: bool) -> None:
    """Plan from a fresh seeded source; with ``store_answers`` the engine stores and reuses
    answers as it does on a secure connection (the noise stays reproducible)."""
    engine = con._engine
    assert hasattr(engine, "rng"), "the engine no longer has .rng: update the neighbour harness"
    engine.rng = RandomSource(seed)
    engine.rng.is_secure = store_answers


def _fail(sql: str, message: str) -> AssertionError:
    """The failure, statement first; only the first line of an engine message is kept."""
    return AssertionError(f"{sql}\n    -> {message.splitlines()[0]}")


def plan_both(pair: Pair, sql: str, **privacy) -> list:
    """The engine's plans of ``sql`` on D and D′, from the same seed (so the same salts)."""
    plans = []
    for con, _ in pair.sides:
        _reseed(con, pair.seed, store_answers=False)
        plans.append(con._engine.plan(sql, script=True, **privacy))
    return plans


def _plan(con: dpsql.Connection, seed: int, sql: str, script: bool, privacy: dict):
    """The engine's plan, or the dpsql.Error refusing it."""
    _reseed(con, seed, store_answers=False)
    try:
        return con._engine.plan(sql, script=script, **privacy)
    except dpsql.InternalError as err:
        raise _fail(sql, f"InternalError while planning: {err}") from err
    except dpsql.Error as err:
        return err
    except Exception as err:
        raise _fail(sql, f"{type(err).__name__} (not a dpsql.Error) while planning: {err}"
                    ) from err


@dataclass
class Answer:
    """What the public path did with a statement on one side."""

    error: dpsql.Error | None
    sets: list[list[tuple]]  # rows of each result set
    charged: bool
    spent: Fraction = Fraction(0)  # what the cursor reports it spent


def _execute(con: dpsql.Connection, seed: int, sql: str, script: bool, privacy: dict
             ) -> Answer:
    _reseed(con, seed, store_answers=True)
    releases = len(con.ledger.history())
    cursor = con.cursor()
    try:
        if script:
            cursor.executescript(sql, **privacy)
        else:
            cursor.execute(sql, **privacy)
    except dpsql.InternalError as err:
        raise _fail(sql, f"InternalError: {err}") from err
    except dpsql.Error as err:
        charged = len(con.ledger.history()) != releases or err.epsilon_spent != 0
        return Answer(err, [], charged)
    except Exception as err:
        raise _fail(sql, f"{type(err).__name__} (not a dpsql.Error): {err}") from err
    sets = [cursor.fetchall()]
    spent = cursor.epsilon_spent
    while cursor.nextset():
        sets.append(cursor.fetchall())
    return Answer(None, sets, True, spent)


def execute_both(pair: Pair, sql: str, *, script: bool = False, **privacy) -> list[Answer]:
    """``sql`` through the public path (``cursor.execute``, or ``executescript``) on D and
    on D′, from the same seed."""
    return [_execute(con, pair.seed, sql.replace(DATA, str(folder)), script, privacy)
            for con, folder in pair.sides]


def check_statement(pair: Pair, sql: str, *, script: bool = False, delta=None,
                    epsilon=EPSILON) -> str:
    """Run ``sql`` on D and D′ through the engine's plan and the public path; assert the
    neighbour contract (module docstring) and return 'released', 'public', 'failed' (on the
    data, on both) or the refusal code."""
    privacy = {"epsilon": epsilon, "delta": delta}
    texts = [sql.replace(DATA, str(folder)) for _, folder in pair.sides]
    planned = [_plan(con, pair.seed, text, script, privacy)
               for (con, _), text in zip(pair.sides, texts, strict=True)]
    refusals = [p for p in planned if isinstance(p, dpsql.Error)]
    if len(refusals) == 1:
        side = "D" if refusals[0] is planned[0] else "D′"
        raise _fail(sql, f"refused on {side} only ({refusals[0].code}): {refusals[0]}")
    if refusals and type(refusals[0]) is not type(refusals[1]):
        raise _fail(sql, f"refused as {refusals[0].code} on D but {refusals[1].code} on D′")
    failed = False
    if not refusals:
        failed = _check_exact(planned[0], planned[1], pair, sql)
    answers = execute_both(pair, sql, script=script, **privacy)
    errors = [a.error for a in answers]
    if (errors[0] is None) != (errors[1] is None):
        side, err = ("D", errors[0]) if errors[0] is not None else ("D′", errors[1])
        raise _fail(sql, f"answered on one database, {type(err).__name__} ({err.code}) on "
                    f"{side}: {err}")
    if errors[0] is not None:
        if type(errors[0]) is not type(errors[1]):
            raise _fail(sql, f"{errors[0].code} on D but {errors[1].code} on D′")
        if any(a.charged for a in answers):
            raise _fail(sql, f"failed on the data and charged ({errors[0].code}): whether a "
                        f"statement fails must not depend on the data: {errors[0]}")
        return errors[0].code
    if refusals:
        raise _fail(sql, f"plan refused ({refusals[0].code}) but execute answered")
    _check_public_sets(planned[0], answers, sql)
    if failed:
        return "failed"
    return "public" if planned[0].release is None else "released"


def contract(pairs: list[Pair], statements: list[str], *, delta=None,
             **options) -> list[list[str]]:
    """``check_statement`` for every statement on every pair; fail once, listing every
    broken statement. Returns the outcomes, by statement then pair."""
    broken, outcomes = [], []
    for sql in statements:
        row = []
        for variant, pair in enumerate(pairs):
            try:
                row.append(check_statement(pair, sql, delta=delta, **options))
            except AssertionError as err:
                broken.append(f"[adversary {variant}] {err}")
                row.append("broken")
        outcomes.append(row)
    assert not broken, f"{len(broken)} broken:\n" + "\n".join(broken)
    return outcomes


def _check_public_sets(planned, answers: list[Answer], sql: str) -> None:
    """Result sets of public statements: equal on D and D′, and no private value shown."""
    for position, (kind, _) in enumerate(planned.order):
        if kind != "public":
            continue
        on_d, on_d_prime = (_comparable(a.sets[position]) for a in answers)
        if on_d != on_d_prime:
            raise _fail(sql, "judged public (ε 0) but answers differ on D and D′: it reads "
                        f"private rows; D′ shows {on_d_prime[:3]}")
        if any(LONG_TEXT in str(value) for row in on_d_prime for value in row):
            raise _fail(sql, "judged public (ε 0) but shows the adversarial person's value")


def _comparable(rows: list[tuple]) -> list[tuple]:
    return sorted((tuple(repr(v) for v in row) for row in rows))


# ---- exact values of the noised parts ----------------------------------------------------

def exact_cells(con: dpsql.Connection, statement) -> tuple[dict, dict]:
    """(values by part column and cell, histogram counts by quantile column and (cell, bin))
    of one planned statement on one database; may raise a dpsql.Error of the backend."""
    engine = con._engine
    names, rows = engine._run_exact(statement.exact_query)
    keys = [i for i, name in enumerate(names) if name.startswith("__k")]
    values = {}
    for part in statement.parts:
        if part.role == "quantile":
            continue
        at = names.index(part.column)
        scale = part.grid  # a sum's, or a count scaled to L∞ of a person's rows
        values[part.column] = _by_cell(((tuple(row[i] for i in keys), row[at]) for row in rows),
                                       scale)
    histograms = {}
    for column, query in statement.histograms:
        _, counts = engine._run(query)
        histograms[column] = _by_cell(((tuple(row[:-1]), row[-1]) for row in counts), 1)
    return values, histograms


def _by_cell(pairs, scale: Fraction | int) -> dict:
    """Values by cell key, in value units (``scale`` is a sum's grid)."""
    cells: dict = {}
    for key, value in pairs:
        key = tuple("NaN" if isinstance(k, float) and math.isnan(k) else k for k in key)
        if key in cells:
            raise AssertionError(f"the exact query returned the cell {key!r} twice")
        value = _exact(value)
        cells[key] = value * scale if isinstance(value, Fraction) else value
    return cells


def _exact(value) -> Fraction | float:
    """A cell value as an exact Fraction (NULL is 0); a non-finite float stays a float."""
    if value is None:
        return Fraction(0)
    if isinstance(value, float) and not math.isfinite(value):
        return value
    if isinstance(value, (int, float, Decimal, Fraction)):
        return Fraction(value)
    return float("nan")  # not a number at all: no sensitivity bound can hold


def change_vector(on_d: dict, on_d_prime: dict) -> list[Fraction | float]:
    """|exact(D) − exact(D′)| per cell in value units; a cell on one side counts in full."""
    return list(changes_by_cell(on_d, on_d_prime).values())


def changes_by_cell(on_d: dict, on_d_prime: dict) -> dict:
    """``change_vector`` by cell key (an ℓ∞ block's cells take the most of its parts)."""
    changes = {}
    for key in on_d.keys() | on_d_prime.keys():
        a, b = on_d.get(key, Fraction(0)), on_d_prime.get(key, Fraction(0))
        if isinstance(a, float) or isinstance(b, float):
            changes[key] = math.inf  # ±inf/NaN released with noise shows the person
        else:
            changes[key] = abs(a - b)
    return changes


def _check_exact(plan_d, plan_d_prime, pair: Pair, sql: str) -> bool:
    """Compare the exact values of every noised part on D and D′; return True when the exact
    queries failed on both databases (the public path then checks that this was refused)."""
    if (plan_d.release is None) != (plan_d_prime.release is None):
        raise _fail(sql, "judged public on one database only")
    if plan_d.release is None:
        return False
    drawn: dict[str, list] = {}  # shared measurement -> its exact cells on D and D′
    for statement, twin in zip(plan_d.release.statements, plan_d_prime.release.statements,
                               strict=True):
        outcomes = []
        for con, _ in pair.sides:
            try:
                outcomes.append(exact_cells(con, statement if con is pair.d else twin))
            except dpsql.InternalError as err:
                raise _fail(sql, f"InternalError in the exact query: {err}") from err
            except dpsql.Error as err:
                outcomes.append(err)
        failures = [o for o in outcomes if isinstance(o, dpsql.Error)]
        if len(failures) == 1:
            side = "D" if failures[0] is outcomes[0] else "D′"
            raise _fail(sql, f"the exact query fails on {side} only ({failures[0].code}): a "
                        f"membership test: {failures[0]}")
        if failures:
            return True
        check_parts(statement, outcomes[0], outcomes[1], sql)
        check_partition(statement, plan_d.release.neighbouring, outcomes[0][0],
                        outcomes[1][0], sql)
        check_threshold(statement, outcomes[0][0], outcomes[1][0], sql)
        check_shared(statement, [o[0] for o in outcomes], drawn, sql)
    return False


def check_shared(statement, cells: list[dict], drawn: dict[str, list], sql: str) -> None:
    """A measurement that a statement shows from an earlier one (``share.py``) has that
    statement's exact values, on D and on D′: the same quantity, bounded alike."""
    for part in statement.parts:
        if part.shared is None:
            continue
        mine = [side[part.column] for side in cells]
        if part.paid:
            drawn[part.shared] = mine
        elif mine != drawn[part.shared]:
            raise _fail(sql, f"part {part.column} shows the shared measurement {part.shared} "
                        "but its exact values differ from the statement that draws it")


def check_threshold(statement, on_d: dict, on_d_prime: dict, sql: str) -> None:
    """Private keys are thresholded on exactly one measurement, whose exact value on a key
    that only D′ has (the adversary's own) is at most 1: the threshold τ
    (``private_key_threshold``) is computed for a key of one person, whose count of persons
    is 1. A count of rows there, or no threshold at all, releases the key."""
    if not statement.checked.has_private_keys:
        return
    marked = [p for p in statement.parts if p.threshold is not None]
    if len(marked) != 1:
        raise _fail(sql, f"{len(marked)} parts carry the threshold of the private keys")
    column = marked[0].column
    for key, value in on_d_prime[column].items():
        if key not in on_d[column] and not value <= 1:
            raise _fail(sql, f"the key {key!r}, which only D′ has, counts {value} in the "
                        f"thresholded part {column}: the threshold is for one person")


def check_parts(statement, on_d: tuple[dict, dict], on_d_prime: tuple[dict, dict],
                sql: str) -> None:
    """Assert Σ|exact(D) − exact(D′)| ≤ sensitivity for every noised part (histogram counts
    for a quantile), and the L2 norm ≤ sensitivity/√cells for the Gaussian mechanism."""
    for part in statement.parts:
        if part.role == "quantile":
            changes = change_vector(on_d[1][part.column], on_d_prime[1][part.column])
        else:
            changes = change_vector(on_d[0][part.column], on_d_prime[0][part.column])
        l1 = sum(changes, Fraction(0))
        bound = part.sensitivity * (1 + TOLERANCE) + TOLERANCE
        if not l1 <= bound:
            raise _fail(sql, f"part {part.column} ({part.role} of {part.aggregate}) moved by "
                        f"{float(l1):g} between D and D′ > its sensitivity "
                        f"{float(part.sensitivity):g}")
        if part.mechanism == "gaussian":
            l2_squared = sum((c * c for c in changes), Fraction(0))
            bound2 = part.sensitivity ** 2 / part.cells * (1 + TOLERANCE) + TOLERANCE
            if not l2_squared <= bound2:
                raise _fail(sql, f"part {part.column} ({part.role} of {part.aggregate}): L2 "
                            f"change {math.sqrt(l2_squared):g} > the L2 sensitivity "
                            f"{float(part.sensitivity) / math.sqrt(part.cells):g} it is "
                            "calibrated to")


def check_partition(statement, neighbouring: str, on_d: dict, on_d_prime: dict,
                    sql: str) -> None:
    """A statement charged as a FILTER partition (``release.filter_partition``: its counts
    and sums in classes proven to share no row, ``compile.disjoint``) pays one share for all
    its classes, max_k Σ_{i∈k} ε_i (``sensitivity.partitioned_loss``), where the parts one
    by one would cost Σ_i ε_i. ``check_parts`` cannot see a wrong proof: each part still moves
    within its own Δ_i when one person's row meets two classes (round 28w: a stored NOCASE
    collation made name = 'p' and name = 'P' both meet one row, each count moved by its full
    Δ and the statement, charged once, released both).

    The proof says more (``sensitivity.filter_classes``): with w_k the share of the person's
    weighted rows in class k, Σ_k w_k ≤ 1 and ‖d_i‖₁ ≤ w_k·Δ_i for each part i of class k.
    So the observed shares, w_k ≥ max_{i∈k} ‖d_i‖₁/Δ_i, add up to at most 1: the parts that
    move by their whole Δ lie in one class, and a person whose rows lie in several classes
    moves each by a fraction. And what the noise of the partition reveals (Laplace:
    Σ_i ε_i·‖d_i‖₁/Δ_i; an ℓ∞ block a class: ε_n/L·Σ_cells ⌈L·max_j |d_j|/Δ_j⌉, ``joint``) is
    at most the share charged for it. Both are asserted; the parts outside the partition
    are charged in full beside it and bounded by ``check_parts``. zCDP spends ρ in sequence,
    taking no partition (``allocate``), so a Gaussian statement is not checked here."""
    classes = filter_partition(statement, neighbouring)
    parts = statement.parts
    if not classes or any(p.mechanism == "gaussian" for p in parts):
        return
    ratios: dict[int, Fraction | float] = {}  # part -> ‖d‖₁/Δ
    lost: Fraction | float = Fraction(0)
    blocks: dict[tuple, tuple] = {}  # an ℓ∞ block -> (its Joint, max_j |d_j|/Δ_j by cell)
    for i in (i for members in classes for i in members):
        part = parts[i]
        moved = changes_by_cell(on_d[part.column], on_d_prime[part.column])
        total = sum(moved.values(), Fraction(0))
        ratios[i] = total / part.sensitivity if part.sensitivity else (
            Fraction(0) if total == 0 else math.inf)
        if part.mechanism == "linf":
            cells = blocks.setdefault(part.joint.columns, (part.joint, {}))[1]
            for key, change in moved.items():
                share = change / part.sensitivity if part.sensitivity else math.inf
                cells[key] = max(cells.get(key, Fraction(0)), share)
        else:
            lost += part.epsilon * ratios[i]
    for block, cells in blocks.values():
        level = block.resolution
        lost += block.noise_epsilon * sum(
            (math.ceil(level * n) if math.isfinite(n) else math.inf for n in cells.values()),
            Fraction(0)) / level
    shares = [max(ratios[i] for i in members) for members in classes]
    filled = sum(shares, Fraction(0))
    charged = partitioned_loss([p.epsilon if i in ratios else Fraction(0)
                                for i, p in enumerate(parts)], classes)
    names = " | ".join(", ".join(parts[i].column for i in members) for members in classes)
    if not filled <= 1 + TOLERANCE:
        moved_in = sum(1 for share in shares if share > 0)
        raise _fail(sql, f"the FILTER partition's classes [{names}] moved by shares "
                    f"{', '.join(f'{float(s):.4g}' for s in shares)} of their sensitivities "
                    f"({float(filled):g} > 1, {moved_in} classes moved): one person's rows fill "
                    f"more than one class, which the partition, charged ε {float(charged):g} "
                    f"once, assumes they do not (ε {float(lost):g} revealed)")
    if not lost <= charged * (1 + TOLERANCE) + TOLERANCE:
        raise _fail(sql, f"the FILTER partition's classes [{names}] reveal ε {float(lost):g} "
                    f"between D and D′ > the ε {float(charged):g} charged for it once")
