"""Generate data/visits.csv: a small shop-visit log where one person has many rows.

Run ``python data/make_visits.py`` to rebuild it (deterministic). Each of 2,000 customers
(`uid`) makes a geometric number of visits (mean 8, a few heavy users with hundreds), on a
weekday, in one of five regions, spending an amount that is usually 5-80 but sometimes above
the declared upper bound of 100, so the engine's clamping is visible.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
CUSTOMERS = 2_000
SEED = 20261121


def make_visits(customers: int = CUSTOMERS, seed: int = SEED) -> pd.DataFrame:
    """The visits table: uid, day, region_id, amount, member."""
    rng = np.random.default_rng(seed)
    visits = rng.geometric(1 / 8, size=customers)
    heavy = rng.choice(customers, size=customers // 100, replace=False)
    visits[heavy] = rng.integers(100, 400, size=heavy.size)
    uid = np.repeat(np.arange(1, customers + 1), visits)
    home = rng.integers(0, 5, size=customers)
    region = np.where(rng.random(uid.size) < 0.8, home[uid - 1], rng.integers(0, 5, uid.size))
    weekend_lover = rng.random(customers) < 0.3
    day_p = np.array([0.13, 0.13, 0.13, 0.13, 0.16, 0.17, 0.15])
    weekend_p = np.array([0.07, 0.07, 0.07, 0.07, 0.12, 0.32, 0.28])
    day = np.where(weekend_lover[uid - 1], rng.choice(7, uid.size, p=weekend_p),
                   rng.choice(7, uid.size, p=day_p))
    amount = np.round(rng.gamma(2.0, 15.0, size=uid.size) + 5 * region, 2)
    member = rng.random(customers) < 0.4
    return pd.DataFrame({
        "uid": uid,
        "day": np.array(DAYS)[day],
        "region_id": region,
        "amount": amount,
        "member": member[uid - 1],
    })


if __name__ == "__main__":
    out = Path(__file__).with_name("visits.csv")
    frame = make_visits()
    frame.to_csv(out, index=False)
    print(f"wrote {out} ({len(frame):,} rows, {frame.uid.nunique():,} customers)")
