"""Shared fixtures: the catalogue of sensitivity-cases.md over small generated tables."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpsql

EDUCATION = ["Preschool", "1st-4th", "5th-6th", "7th-8th", "9th", "10th", "11th", "12th",
             "HS-grad", "Some-college", "Assoc-voc", "Assoc-acdm", "Bachelors", "Masters",
             "Prof-school", "Doctorate"]
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="run the long statistical tests too")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="long statistical run: use pytest --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def make_adult(rows: int = 3000, seed: int = 1) -> pd.DataFrame:
    """A small adult-like table with the columns of the sensitivity catalogue."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(17, 91, rows),
        "hours": rng.integers(1, 100, rows),
        "education": rng.choice(EDUCATION[:15], rows),  # Doctorate absent: zero-fill shows it
        "sex": rng.choice(["Female", "Male"], rows),
        "salary": rng.choice(["<=50K", ">50K"], rows, p=[0.75, 0.25]),
    })


def write_adult_with_nulls(folder: Path) -> Path:
    """adult.csv with every seventh age NULL, and visits.csv, in ``folder``."""
    frame = make_adult()
    frame["age"] = frame["age"].astype("Int64")
    frame.loc[np.arange(0, len(frame), 7), "age"] = pd.NA
    frame.to_csv(folder / "adult.csv", index=False)
    make_visits().to_csv(folder / "visits.csv", index=False)
    return folder


def make_visits(people: int = 300, seed: int = 2) -> pd.DataFrame:
    """A small visits table: several rows per uid."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 12, people)
    uid = np.repeat(np.arange(people), counts)
    return pd.DataFrame({
        "uid": uid,
        "day": rng.choice(DAYS, uid.size),
        "amount": np.round(rng.uniform(0, 100, uid.size), 2),
        "region_id": rng.integers(0, 5, uid.size),
    })


def catalogue(folder: Path, neighbouring: str = "add_remove", budget: float = 1000.0) -> dict:
    """The catalogue of sensitivity-cases.md, with sources in ``folder``."""
    return {
        "name": "cases",
        "neighbouring": neighbouring,
        "budget": {"epsilon": budget, "delta": 1e-6},
        "tables": {
            "adult": {
                "source": str(folder / "adult.csv"), "privacy_unit": None,
                "columns": {
                    "age": {"type": "int", "lower": 17, "upper": 90},
                    "hours": {"type": "int", "lower": 1, "upper": 99},
                    "education": {"type": "text", "values": EDUCATION},
                    "sex": {"type": "text", "values": ["Female", "Male"]},
                    "salary": {"type": "text", "values": ["<=50K", ">50K"]},
                },
            },
            "visits": {
                "source": str(folder / "visits.csv"), "privacy_unit": "uid",
                "max_groups_per_unit": 3, "max_rows_per_group": 2,
                "columns": {
                    "uid": {"type": "int"},
                    "day": {"type": "text", "values": DAYS},
                    "amount": {"type": "float", "lower": 0, "upper": 100},
                    "region_id": {"type": "int", "values": [0, 1, 2, 3, 4]},
                },
            },
        },
    }


REGIONS = ["North", "East", "South", "West", "Centre"]


def join_tables(folder: Path, **purchase_columns) -> dict:
    """A public ``regions`` table and a private ``purchases`` table (uid; L0 = 2, L∞ = 1) with
    sources in ``folder``; ``purchase_columns`` declares columns besides uid, item and price."""
    return {
        "regions": {
            "public": True, "source": str(folder / "regions.csv"),
            "columns": {"region_id": "int", "name": {"type": "text", "values": REGIONS}}},
        "purchases": {
            "privacy_unit": "uid", "max_groups_per_unit": 2, "max_rows_per_group": 1,
            "source": str(folder / "purchases.csv"),
            "columns": {"uid": "int", "item": {"type": "text", "values": ["a", "b", "c"]},
                        "price": {"type": "float", "lower": 0, "upper": 50},
                        **purchase_columns}},
    }


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A folder with adult.csv and visits.csv."""
    make_adult().to_csv(tmp_path / "adult.csv", index=False)
    make_visits().to_csv(tmp_path / "visits.csv", index=False)
    return tmp_path


@pytest.fixture
def connect(data_dir: Path):
    """Factory: an analyst connection on the case catalogue with its own ledger file."""
    opened = []

    def factory(neighbouring: str = "add_remove", seed: int | None = 7, budget: float = 1000.0,
                **kwargs):
        con = dpsql.connect(metadata=catalogue(data_dir, neighbouring, budget),
                            ledger=data_dir / f"ledger-{neighbouring}.sqlite",
                            insecure_seed=seed, **kwargs)
        opened.append(con)
        return con

    yield factory
    for con in opened:
        con.close()


def require_dataset(name: str) -> Path:
    """Path of a shared data set; skip when absent locally, fail in CI."""
    path = dpsql.catalog.datasets_dir() / name
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"shared data set {path} is missing in CI")
        pytest.skip(f"shared data set {path} not found (set DPSQL_DATASETS)")
    return path
