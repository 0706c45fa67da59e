"""Data and catalogue of the SQL-surface corpus: the neighbour harness's tables and catalogue
(tests/fuzz/neighbours.py) plus public tables without declared columns, a table with dates and
timestamps and a schema-qualified table name; and neighbouring pairs over them.

Shared by test_sql_surface.py and test_dialects.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours  # noqa: E402
from neighbours import DAYS, NULL, REGIONS, TARGET, Pair  # noqa: E402

import dpsql  # noqa: E402

ROOMS = ["single", "double", "suite"]
REGION_LABELS = [*REGIONS, "Islands"]  # the label domain read from region_names (NULL dropped)
# Tables of the new features, catalogued only for the statements that read them, so that one
# feature's catalogue cannot hide the results of the others: stays (date and timestamp
# columns) and the public tables without declared columns.
OPTIONAL_TABLES = ("stays", "region_names", "day_kinds")


def _dates(start: str, days: int, rng, rows: int) -> list[str]:
    first = np.datetime64(start)
    return [str(first + int(k)) for k in rng.integers(0, days, rows)]


def extra_tables(people: int = neighbours.PEOPLE) -> dict[str, pd.DataFrame]:
    """The corpus's own tables: region_names, day_kinds (public), stays, newcomer.orders."""
    rng = np.random.default_rng(8)
    stays = 120
    check_in = _dates("2024-01-01", 31, rng, stays)
    nights = rng.integers(0, 30, stays)
    check_out = [str(min(np.datetime64(d) + int(n), np.datetime64("2024-03-01")))
                 for d, n in zip(check_in, nights, strict=True)]
    return {
        "region_names": pd.DataFrame({"region_id": [0, 1, 2, 3, 4, 9, 8],
                                      "label": [*REGION_LABELS, None]}, dtype=object),
        "day_kinds": pd.DataFrame({"day": DAYS,
                                   "kind": ["weekday"] * 5 + ["weekend"] * 2}),
        "stays": pd.DataFrame({
            "uid": rng.integers(0, people, stays),
            "check_in": check_in, "check_out": check_out,
            "arrived": [f"{d} {h:02d}:{m:02d}:00" for d, h, m in
                        zip(check_in, rng.integers(0, 24, stays), rng.integers(0, 60, stays),
                            strict=True)],
            "room": rng.choice(ROOMS, stays),
            "rate": rng.uniform(0, 200, stays).round(2)}),
        "newcomer.orders": pd.DataFrame({"uid": rng.integers(0, people, 60),
                                         "total": rng.uniform(0, 10, 60).round(2),
                                         "region_id": rng.integers(0, 5, 60)}),
    }


def _cycled(values: list, rows: int) -> list:
    return [values[i % len(values)] for i in range(rows)]


def extra_adversary(variant: int, uid) -> dict[str, pd.DataFrame]:
    """The adversarial person's rows in the corpus's own private tables (as variants 0..2 of
    neighbours.adversary: in bounds but heavy; extreme values; NULL-heavy)."""
    if variant == 0:
        check_in, check_out = ["2024-01-31"], ["2024-03-01"]
        arrived, rooms, rates, totals = ["2024-01-31 23:59:59"], ROOMS, ["200"], ["10"]
    elif variant == 1:
        check_in = ["2024-01-31", "1900-01-01", "2999-12-31", "2024-01-01"]
        check_out = ["1900-01-01", "2999-12-31", "2024-03-01", "2024-01-01", "2024-02-15"]
        arrived = ["1900-01-01 00:00:00", "2999-12-31 23:59:59", "2024-01-05 12:00:00"]
        rooms, rates, totals = [*ROOMS, "penthouse", ""], ["1e20", "-1e20", "inf", "nan"], \
            ["1e20", "-inf", "nan"]
    else:
        check_in, check_out = [None, "2024-01-31", "2999-12-31"], [None, "1900-01-01"]
        arrived, rooms, rates, totals = [None], [None, "suite"], [None, "200"], [None, "-1e20"]
    rows = 330
    return {
        "stays": pd.DataFrame({"uid": [str(uid)] * rows, "check_in": _cycled(check_in, rows),
                               "check_out": _cycled(check_out, rows),
                               "arrived": _cycled(arrived, rows),
                               "room": _cycled(rooms, rows), "rate": _cycled(rates, rows)},
                              dtype=object),
        "newcomer.orders": pd.DataFrame({"uid": [str(uid)] * 40,
                                         "total": _cycled(totals, 40),
                                         "region_id": _cycled(["0", "4", None, "9"], 40)},
                                        dtype=object),
    }


def metadata(folder: Path, *, neighbouring: str = "add_remove",
             include: tuple[str, ...] = OPTIONAL_TABLES) -> dict:
    """neighbours.metadata plus newcomer.orders and the OPTIONAL_TABLES in ``include``:
    region_names and day_kinds (public, columns read from their files) and stays (date and
    timestamp columns)."""
    meta = neighbours.metadata(folder, neighbouring=neighbouring)
    null = {"null": NULL}
    optional = {
        "region_names": {"public": True, "source": str(folder / "region_names.csv"),
                         "csv": null},
        "day_kinds": {"public": True, "source": str(folder / "day_kinds.csv"), "csv": null},
        "stays": {
            "privacy_unit": "uid", "max_groups_per_unit": 2, "max_rows_per_group": 1,
            "source": str(folder / "stays.csv"), "csv": null,
            "columns": {
                "uid": "int",
                "check_in": {"type": "date", "lower": "2024-01-01", "upper": "2024-01-31"},
                "check_out": {"type": "date", "lower": "2024-01-01", "upper": "2024-03-01"},
                "arrived": {"type": "timestamp", "lower": "2024-01-01 00:00:00",
                            "upper": "2024-01-31 23:59:59"},
                "room": {"type": "text", "values": ROOMS},
                "rate": {"type": "float", "lower": 0, "upper": 200}}},
    }
    meta["tables"].update({name: optional[name] for name in include})
    meta["tables"]["newcomer.orders"] = {
        "privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
        "source": str(folder / "newcomer.orders.csv"), "csv": null,
        "columns": {"uid": "int", "total": {"type": "float", "lower": 0, "upper": 10},
                    "region_id": {"type": "int", "values": [0, 1, 2, 3, 4]}}}
    return meta


def tables_read(sql: str) -> tuple[str, ...]:
    """The OPTIONAL_TABLES a statement names (the catalogue it needs)."""
    return tuple(name for name in OPTIONAL_TABLES if name in sql.lower())


def d_tables() -> dict[str, pd.DataFrame]:
    """D: the harness's base tables and the corpus's own."""
    return {**neighbours.base_tables(), **extra_tables()}


def d_prime_tables(variant: int, neighbouring: str) -> dict[str, pd.DataFrame]:
    """D′: D plus the adversarial person (add_remove), or D with one person replaced by the
    adversarial person (replace: the first adult row, and every row of uid 0, are removed)."""
    base = d_tables()
    if neighbouring == "replace":
        base = {name: (frame.iloc[1:] if name == "adult" else
                       frame[frame["uid"] != 0] if "uid" in frame else frame)
                for name, frame in base.items()}
    uid = TARGET if variant < 2 else neighbours.SMALL
    extra = {**neighbours.adversary(variant), **extra_adversary(variant, uid)}
    return neighbours.with_rows(base, extra)


def connect(folder: Path, ledger: Path, *, neighbouring: str = "add_remove",
            include: tuple[str, ...] = OPTIONAL_TABLES, dialect: str | None = None,
            seed: int = 11) -> dpsql.Connection:
    """An analyst connection on the tables in ``folder``; ``dialect`` only when given."""
    options = {} if dialect is None else {"dialect": dialect}
    return dpsql.connect(metadata=metadata(folder, neighbouring=neighbouring, include=include),
                         ledger=ledger, insecure_seed=seed, **options)


def open_pair(root: Path, *, variant: int, neighbouring: str = "add_remove",
              include: tuple[str, ...] = OPTIONAL_TABLES, dialect: str | None = None) -> Pair:
    """A neighbour-harness Pair (D, D′) over the corpus catalogue."""
    folders = (root / "d", root / "d_prime")
    neighbours.write_database(folders[0], d_tables())
    neighbours.write_database(folders[1], d_prime_tables(variant, neighbouring))
    cons = [connect(folder, root / f"{folder.name}.sqlite", neighbouring=neighbouring,
                    include=include, dialect=dialect) for folder in folders]
    return Pair(cons[0], cons[1], folders=folders)
