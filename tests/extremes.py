"""Extreme stored values and a battery of statements that must never fail on them.

Rows are appended to each private table that hold, in every column at once, an extreme value
of the column's declared type (NaN, ±inf, ±1e20, tiny and subnormal doubles and NULL for
doubles; the 64-bit limits and NULL for integers; empty, unconvertible and very long text and
NULL for text). Every statement of the battery puts each column in a role an expression can
play (aggregate input, WHERE with arithmetic and casts, GROUP BY of a CASE, quantiles): it
must be answered on a database with those rows exactly as on one without, on every backend,
because whether a query fails must never depend on one person's values (issue "privacy by
construction", item 3). ``tests/privacy/test_total_rendering.py`` runs it on DuckDB,
``tests/backends/test_total_rendering_warehouses.py`` on PostgreSQL and Spark.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from conftest import make_adult, make_visits

import dpsql

# PostgreSQL raises on a double product or quotient that underflows to 0: 1e-200 and the
# smallest subnormal are there for it
FLOATS = ["nan", "inf", "-inf", "1e20", "-1e20", None, "1e-200", "5e-324",
          "1.7976931348623157e308", "-1e308"]
INTS = ["9223372036854775807", "-9223372036854775808", None, "0", "-1", "1"]
TEXTS = ["", "abc", "x" * 5000, None, "1e400", "-9223372036854775809"]
POOLS = {"float": FLOATS, "int": INTS, "text": TEXTS}
ROWS = max(len(pool) for pool in POOLS.values())


def tables() -> dict[str, tuple[pd.DataFrame, dict[str, str]]]:
    """The private tables (rows and declared column types) of the test catalogue."""
    rng = np.random.default_rng(5)
    purchases = pd.DataFrame({"uid": rng.integers(0, 100, 400),
                              "item": rng.choice(["a", "b", "c"], 400),
                              "price": rng.uniform(0, 50, 400).round(2)})
    return {
        "adult": (make_adult(600), {"age": "int", "hours": "int", "education": "text",
                                    "sex": "text", "salary": "text"}),
        "visits": (make_visits(80), {"uid": "int", "day": "text", "amount": "float",
                                     "region_id": "int"}),
        "purchases": (purchases, {"uid": "int", "item": "text", "price": "float"}),
    }


def with_extremes(frame: pd.DataFrame, types: dict[str, str]) -> pd.DataFrame:
    """The table with rows of extreme values appended, the k-th extreme of each column's
    type (cycling through its pool) in row k, as text the backends parse."""
    rows = {column: [POOLS[types[column]][k % len(POOLS[types[column]])] for k in range(ROWS)]
            for column in frame.columns}
    return pd.concat([frame.astype(object), pd.DataFrame(rows, dtype=object)],
                     ignore_index=True)


def battery() -> list[str]:
    """The statements, each column of each table in every role."""
    statements = []
    for table, (_, types) in tables().items():
        for column, kind in types.items():
            if kind in ("int", "float"):
                clamp = f"LEAST(GREATEST({column}, 0), 10)"
                statements += [
                    f"SELECT SUM({clamp}) AS s, AVG({clamp}) AS a FROM {table}",
                    f"SELECT VAR_SAMP({clamp}) AS v, MEDIAN({clamp}) AS m FROM {table}",
                    f"SELECT MIN({clamp}) AS lo, MAX({clamp}) AS hi FROM {table}",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE {column} * 1000 + 7 > 5",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE ABS(-{column}) > 1 OR "
                    f"{column} / 0 IS NULL OR {column} % 3 = 1",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE {column} * {column} > 1 OR "
                    f"{column} * 0.001 > 1 OR {column} / 3 > 1 OR 1e-300 / {column} > 1 OR "
                    f"{column} / 1e200 > 1",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE CAST({column} AS INT) > 3 "
                    f"AND CAST({column} AS TEXT) <> 'x'",
                    f"SELECT CASE WHEN {column} * {column} > 100 THEN 'big' ELSE 'small' END "
                    f"AS k, COUNT(*) AS n FROM {table} GROUP BY k",
                    f"SELECT SUM(CASE WHEN ROUND({column} / 3) > 2 THEN 1 ELSE 0 END) AS s "
                    f"FROM {table}",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE ROUND({column}) > 3 OR "
                    f"SIGN({column}) > 0 OR ROUND({column} / 7) < 2 OR "
                    f"ROUND({column}, 2) * 3 > 1 OR ROUND({column} * 1e200, 15) < 0",
                    # 18 factors: past a double's range for a BIGINT limit (PostgreSQL
                    # computes them in NUMERIC, whose cast to a double then fails)
                    f"SELECT COUNT(*) AS n FROM {table} WHERE "
                    f"CAST({' * '.join([column] * 18)} AS DOUBLE) > 0 OR "
                    f"SQRT({' * '.join([column] * 18)}) > 1",
                    f"SELECT SUM(LEAST(GREATEST(SQRT({column}) + LN({column}) + "
                    f"LOG10({column}) + LOG(3, {column}) + EXP({column}) + "
                    f"POWER({column}, 3) + POWER({column}, 0.5) + POWER({column}, 64), 0), "
                    f"10)) AS s FROM {table}",
                ]
            else:
                statements += [
                    f"SELECT COUNT(*) AS n FROM {table} WHERE "
                    f"LENGTH({column}) * 9223372036854775807 > 2",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE CAST({column} AS INT) + 1 > 2 "
                    f"OR CAST({column} AS DOUBLE) * 1e300 > 0",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE UPPER(SUBSTRING({column}, 2, 3)) "
                    f"|| 'z' = 'BCz' OR TRIM({column}) LIKE '%a%'",
                    f"SELECT COUNT(*) AS n FROM {table} WHERE LEFT({column}, 2) || "
                    f"RIGHT({column}, 3) = 'abc' OR REPLACE({column}, 'x', '') = '' OR "
                    f"POSITION('b' IN {column}) * 9223372036854775807 > 2",
                    # the 5,000-character text grown by REPLACE and ||, past MAX_TEXT
                    f"SELECT COUNT(*) AS n FROM {table} WHERE LENGTH(REPLACE(REPLACE("
                    f"{column}, 'x', '{'x' * 30}'), 'x', '{'y' * 30}') || {column}) > 7",
                    f"SELECT SUM(LEAST(GREATEST(CAST({column} AS DOUBLE), -5), 5)) AS s "
                    f"FROM {table}",
                ]
    return statements


def outcome(con: dpsql.Connection, sql: str) -> str:
    """'answered', or the code of the dpsql.Error that refused the statement (an
    InternalError, a failure of the exact query, propagates)."""
    try:
        con.execute(sql, epsilon=1).fetchall()
    except dpsql.InternalError:
        raise
    except dpsql.Error as err:
        return err.code
    return "answered"
