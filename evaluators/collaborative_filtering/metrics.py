"""MAE, RMSE (Eqs. 5.1, 5.2) over the predictions produced, and coverage over all targets."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import duckdb
import pandas as pd


@dataclass(frozen=True)
class Accuracy:
    """Errors on the 1-5 scale over ``n_predicted`` of ``n_required`` held-out ratings."""

    mae: float
    rmse: float
    coverage: float
    n_predicted: int
    n_required: int

    def as_dict(self) -> dict:
        """Plain dict for JSON and CSV rows."""
        return asdict(self)


def score(con: duckdb.DuckDBPyConnection, predictions: pd.DataFrame) -> Accuracy:
    """Compare ``predictions (user_id, item_id, prediction)`` with the true ``cf_targets``.

    Coverage = predictions produced / predictions required (1 - t/T in the thesis).
    """
    con.register("cf_predictions_df", predictions)
    mae, rmse, n_predicted, n_required = con.execute(
        """
        SELECT avg(abs(t.rating - p.prediction)), sqrt(avg((t.rating - p.prediction) ^ 2)),
               count(p.prediction), count(*)
        FROM cf_targets t LEFT JOIN cf_predictions_df p USING (user_id, item_id)
        """
    ).fetchall()[0]
    con.unregister("cf_predictions_df")
    return Accuracy(mae=float("nan") if mae is None else float(mae),
                    rmse=float("nan") if rmse is None else float(rmse),
                    coverage=n_predicted / n_required,
                    n_predicted=int(n_predicted), n_required=int(n_required))
