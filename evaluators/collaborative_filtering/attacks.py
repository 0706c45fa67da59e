"""What an RPT release gives away: measurements behind the report's privacy section."""

from __future__ import annotations

import numpy as np
import pandas as pd


def rpt_disclosure(true_z: pd.DataFrame, masked: pd.DataFrame) -> dict[str, float]:
    """Two disclosure measures of one masked release against the true z-scores.

    - ``real_cells_exposed``: share of real cells whose value lies outside the user's fake-value
      range ``[-max|fake|, max|fake|]``; such a cell cannot be a fake, so an attacker who
      estimates the user's noise bound alpha_u from the row knows the item was rated (the fake
      values are pure noise in ``[-alpha_u, alpha_u]``, real ones are ``z`` plus that noise).
      Users without fake cells are left out.
    - ``value_rmse``: RMSE between released and true z on real cells, i.e. the error of the
      trivial reconstruction "the released value is the rating".
    """
    merged = masked.merge(true_z, on=["user_id", "item_id"], how="left")
    is_real = merged["z"].notna().to_numpy()
    fake_bound = merged.loc[~is_real].groupby("user_id")["v"].agg(lambda v: np.abs(v).max())
    real = merged.loc[is_real].join(fake_bound.rename("bound"), on="user_id")
    with_fakes = real["bound"].notna()
    exposed = (real.loc[with_fakes, "v"].abs() > real.loc[with_fakes, "bound"]).mean()
    value_rmse = float(np.sqrt(((real["v"] - real["z"]) ** 2).mean()))
    return {"real_cells_exposed": float(exposed), "value_rmse": value_rmse}
