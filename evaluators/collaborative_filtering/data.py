"""MovieLens ratings in DuckDB: the user split, held-out targets and true z-scores.

Every table this module creates is prefixed ``cf_`` and keyed by ``(user_id, item_id)``;
a missing cell is an absent row, never a NULL.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

import dpsql
import dpsql.catalog

# the repository's, wherever the command runs (a relative path failed outside the checkout)
DEFAULT_METADATA = str(Path(__file__).resolve().parents[2] / "data" / "datasets" /
                       "movielens.yaml")
_ANALYST = "cf-evaluator"
RATING_LOWER, RATING_UPPER = 1, 5


@dataclass(frozen=True)
class Split:
    """Random partition of users into neighbours (train) and active users (test)."""

    train: np.ndarray
    test: np.ndarray


def open_ratings(
    metadata: str | Path = DEFAULT_METADATA, ledger: str | None = None,
    table: str = "ratings", analyst: str | None = None,
) -> dpsql.CustodianConnection:
    """A custodian connection whose DuckDB holds ``cf_ratings(user_id, item_id, rating)``.

    The true ratings are the custodian's: only the experiment harness (ground truth and the
    client-side simulation of masking) reads them. Copying them is logged once in the ledger;
    everything after runs on ``.duckdb``. ``ledger`` follows ``dpsql.connect_custodian``
    (None: beside the metadata; ``":memory:"``: throw-away); the read is logged under
    ``analyst`` (default: the harness's own name).
    """
    if dpsql.catalog.load_catalog(metadata).table(table) is None:
        raise dpsql.ProgrammingError(
            f"metadata {str(metadata)!r} has no {table!r} table",
            hint="pass --metadata data/datasets/movielens.yaml (or a copy of it)",
        )
    lower, upper = item_range(metadata, table)
    cust = dpsql.connect_custodian(None, metadata=metadata, analyst=analyst or _ANALYST,
                                 ledger=ledger)
    # DuckDB's progress bar would interleave with --json output on the terminal.
    cust.duckdb.execute("SET enable_progress_bar = false")
    cust.execute(
        'CREATE OR REPLACE TEMP TABLE cf_ratings AS '
        'SELECT "user"::INTEGER AS user_id, item::INTEGER AS item_id, rating::DOUBLE AS rating '
        f'FROM "{table}" WHERE item::INTEGER BETWEEN {lower} AND {upper}'
    )
    # the public item domain travels with the ratings (``n_items``), from the metadata
    cust.duckdb.execute(f"CREATE OR REPLACE TEMP MACRO cf_items() AS {upper}")
    return cust


def item_range(metadata: str | Path, table: str = "ratings") -> tuple[int, int]:
    """The declared (public) [lower, upper] of the table's ``item`` column: a user rates at
    most its items, once each, which bounds their local ε without reading a rating.

    Raises:
        dpsql.ProgrammingError: the column declares no bounds.
    """
    column = dpsql.catalog.load_catalog(metadata).table(table).column("item")
    if column is None or not column.is_bounded:
        raise dpsql.ProgrammingError(
            f"the {table!r} table declares no bounds for its 'item' column",
            hint="declare 'item: {type: int, lower: 1, upper: <largest item id>}'")
    return int(column.lower), int(column.upper)


def split_users(con: duckdb.DuckDBPyConnection, n_train: int, rng: np.random.Generator) -> Split:
    """Draw ``n_train`` neighbour users at random; the rest are active (test) users.

    Creates ``cf_split(user_id, is_test)``, ``cf_targets(user_id, item_id, rating)`` (every
    rating of every test user is predicted once, leave-one-out) and
    ``cf_target_stats(user_id, item_id, mu, sd)``: the active user's own mean and standard
    deviation without the held-out rating, used client-side to de-normalize (Eq. 4.2/4.3).
    """
    users = con.execute("SELECT DISTINCT user_id FROM cf_ratings ORDER BY 1").fetchnumpy()
    users = users["user_id"]
    if not 0 < n_train < len(users):
        # the number of users is exact: it is not named
        raise dpsql.ProgrammingError(
            f"n_train={n_train} must leave at least one user on each side",
            hint="choose a training size of at least 1 and below the number of users",
        )
    shuffled = rng.permutation(users)
    split = Split(train=np.sort(shuffled[:n_train]), test=np.sort(shuffled[n_train:]))
    frame = pd.DataFrame({"user_id": users, "is_test": np.isin(users, split.test)})
    con.register("cf_split_df", frame)
    con.execute("CREATE OR REPLACE TEMP TABLE cf_split AS SELECT * FROM cf_split_df")
    con.unregister("cf_split_df")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE cf_targets AS "
        "SELECT r.* FROM cf_ratings r JOIN cf_split USING (user_id) WHERE is_test"
    )
    # Leave-one-out moments from per-user sums: population sd of the other d-1 ratings.
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE cf_target_stats AS
        WITH s AS (SELECT user_id, sum(rating) AS s1, sum(rating * rating) AS s2,
                          count(*) AS d FROM cf_ratings GROUP BY user_id)
        SELECT t.user_id, t.item_id,
               (s.s1 - t.rating) / (s.d - 1) AS mu,
               sqrt(greatest((s.s2 - t.rating * t.rating) / (s.d - 1)
                             - ((s.s1 - t.rating) / (s.d - 1)) ^ 2, 0)) AS sd
        FROM cf_targets t JOIN s USING (user_id)
        """
    )
    return split


def create_zscores(
    con: duckdb.DuckDBPyConnection, source: str, value_column: str, target: str
) -> str:
    """Per-user z-scores (Eq. 3.5, population sd) of ``source.value_column`` as ``target``.

    Rows of users whose values are all equal get no z-score and are dropped: such a user can
    neither be a neighbour nor receive a prediction.
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {target} AS
        SELECT user_id, item_id, z FROM (
            SELECT user_id, item_id,
                   ({value_column} - avg({value_column}) OVER w)
                   / nullif(stddev_pop({value_column}) OVER w, 0) AS z
            FROM {source} WINDOW w AS (PARTITION BY user_id))
        WHERE z IS NOT NULL
        """
    )
    return target


def n_items(con: duckdb.DuckDBPyConnection) -> int:
    """Size of the public item domain: 1 to the ``item`` column's declared upper bound
    (``open_ratings``), never the data's largest item, over which RPT's fake cells were
    drawn (adversary round I)."""
    return int(con.execute("SELECT cf_items()").fetchall()[0][0])


def fetch_long(con: duckdb.DuckDBPyConnection, table: str, column: str) -> pd.DataFrame:
    """``(user_id, item_id, <column>)`` of ``table`` ordered by user then item."""
    return con.execute(
        f"SELECT user_id, item_id, {column} FROM {table} ORDER BY user_id, item_id"
    ).fetchdf()


def store_long(con: duckdb.DuckDBPyConnection, table: str, frame: pd.DataFrame) -> str:
    """Materialize a long ``(user_id, item_id, value...)`` frame as the temp table ``table``."""
    con.register(f"{table}_df", frame)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM {table}_df")
    con.unregister(f"{table}_df")
    return table
