"""Spark's LIKE and ILIKE as RLIKE of a regex built from the pattern (``SparkDialect.like_regex``):
the answers of DuckDB's LIKE (ILIKE: of Spark's ``LOWER(x) LIKE LOWER(p)``, whose case folding
it keeps) on edge cases and seeded random values and patterns, in time linear in the value.
Spark's own LIKE compiles ``.*`` for each %, which backtracks: '%a%b%c%d%e%f%g%' on one
person's long value never ended."""
# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import random
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest
from servers import spark  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))  # the harness lives with the fuzz

import neighbours as nb

import dpsql
from dpsql.compile.ir import Expr
from dpsql.compile.render import Dialect, SparkDialect

pytestmark = pytest.mark.spark

# a..f over and over, without g: Spark's own LIKE backtracks through every way of placing
# a, b ... f (240 characters took 6 s, each doubling 64 times more)
LONG = "abcdef" * 834
MANY_PERCENTS = "%a%b%c%d%e%f%g%"

EDGE_VALUES = [None, "", "a", "A", "\n", "a\nb", "a\n", "ab\n\n", "%", "_", "abc", "ABC",
               "aXbXa", "abba", "😀", "x😀y", "😀😀", "Q\\E", "\\Q.*\\E", "ΑΣ", "ας", "ΑΣ.Β",
               "İ", "i̇", "a.b", "a*b", "(a)", "[a]", "$", "^a", "it's", "a b", "ab" * 50]
EDGE_PATTERNS = ["", "%", "%%", "_", "__", "%_%", "a", "a%", "%a", "%a%", "a_b", "a%b", "%\n%",
                 "_\n", "a\n", ".", ".*", "%(a)%", "[a]", "$", "^%", "%Q%E%", "Q%E", "it's",
                 "'%", "😀", "_😀_", "%😀", "__", "ΑΣ%", "%σ", "%Σ", "İ%", "%a%b%a%", "a%a",
                 "%aa%a", "%ab%ba%", "a%%b", "%a_%_a%", "%A%", "%ABC%", MANY_PERCENTS]
ALPHABET = ["a", "a", "b", "A", "B", "\n", ".", "*", "(", "Q", "E", "😀", "é", "Σ", "'", " "]


def _random_cases(seed: int = 7) -> tuple[list, list]:
    """Short values over a small alphabet, and patterns: half of them a value with some
    characters replaced by or followed by % or _ (likely matches), half random."""
    rng = random.Random(seed)

    def word(low: int, high: int) -> str:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(low, high)))

    values = [word(0, 10) for _ in range(200)]
    patterns = []
    for i in range(120):
        chars = list(rng.choice(values) if i % 2 else word(0, 6))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(chars))
            wild = rng.choice(["%", "%", "_"])
            if at < len(chars) and rng.random() < 0.5:
                chars[at] = wild
            else:
                chars.insert(at, wild)
        patterns.append("".join(chars))
    return values, patterns


def _column() -> Expr:
    return Expr("col", (), "text", "v")


def _like(op: str, pattern: str) -> Expr:
    found = Expr("ilike" if op == "ilike" else "like", (_column(),), "bool", pattern)
    return Expr("not", (found,), "bool") if op == "not like" else found


CASES = [(op, pattern) for op in ("like", "not like", "ilike")
         for pattern in EDGE_PATTERNS + _random_cases()[1]]


def test_like_answers_as_duckdb_and_ilike_as_lower_like(spark):
    values = EDGE_VALUES + _random_cases()[0]
    frame = pd.DataFrame({"i": range(len(values)), "v": pd.Series(values, dtype=object)})
    likes = [k for k, (op, _) in enumerate(CASES) if op != "ilike"]
    ilikes = [k for k, (op, _) in enumerate(CASES) if op == "ilike"]
    on_spark = SparkDialect()
    # ILIKE against Spark's own case folding (DuckDB lowers 'ΑΣ' to 'ασ', Java to 'ας'), so
    # on short values only: LONG is the value Spark's own LIKE never ends on
    folded = [f"(LOWER(v) LIKE LOWER({on_spark.string(CASES[k][1])}))" for k in ilikes]
    spark_rows = spark.createDataFrame(list(enumerate(values)), "i INT, v STRING").selectExpr(
        "i", *(f"{sql} AS c{k}" for k, sql in enumerate(
            [on_spark.expr(_like(*case)) for case in CASES] + folded))).orderBy("i").collect()
    duck = duckdb.connect()
    duck.register("frame", frame)
    duck_rows = duck.sql(f"SELECT {', '.join(Dialect().expr(_like(*CASES[k])) for k in likes)} "
                         "FROM frame ORDER BY i").fetchall()
    assert len(spark_rows) == len(duck_rows) == len(values)
    wrong = []
    for value, got, by_duckdb in zip(values, spark_rows, duck_rows, strict=True):
        rendered, lower_like = got[1:len(CASES) + 1], got[len(CASES) + 1:]
        expected = dict(zip(likes, by_duckdb, strict=True)) | dict(
            zip(ilikes, lower_like, strict=True))
        wrong += [(value, *CASES[k]) for k in range(len(CASES)) if rendered[k] != expected[k]]
    assert not wrong, wrong[:20]


def test_like_regex_reads_a_pattern_as_text():
    regex = SparkDialect().like_regex
    assert regex("%", fold=False) == r"'(?s)\\A'"  # anything, NULL aside
    assert regex("a.b%", fold=False) == r"'(?s)\\A\\Qa.b\\E'"  # a prefix: the end is free
    assert regex("_%a%b", fold=False) == r"'(?s)\\A.(?>.*?\\Qa\\E).*\\Qb\\E\\z'"
    assert regex("ΑΣ_%Σ%", fold=True) == (  # LOWER of each run, as of the whole pattern
        r"concat('(?s)\\A\\Q', LOWER('ΑΣ'), '\\E.(?>.*?\\Q', LOWER('Σ'), '\\E)')")


# --- one person's long value, through dpsql ------------------------------------------------

SHOPS = [LONG, None, "", "a\nb", "abcdefg", "ABCDEFG", "x" * 4000 + "\n"]
STATEMENTS = [f"SELECT COUNT(*) AS n FROM purchases WHERE shop LIKE '{MANY_PERCENTS}'",
              f"SELECT COUNT(*) AS n FROM purchases WHERE shop NOT LIKE '{MANY_PERCENTS}'",
              f"SELECT COUNT(*) AS n FROM purchases WHERE shop ILIKE '{MANY_PERCENTS.upper()}'"]


@pytest.fixture(scope="module")
def pair(spark, tmp_path_factory):
    """D and D′ = D plus one person whose 70 purchases name shops of 5,000 characters,
    NULL, empty and with newlines; purchases.shop is text without public values."""
    base = nb.base_tables()
    rows = 70
    person = {"purchases": pd.DataFrame({
        "uid": [str(nb.TARGET)] * rows, "item": nb._cycled(nb.ITEMS, rows),
        "shop": nb._cycled(SHOPS, rows), "price": ["50"] * rows}, dtype=object)}
    opened = nb.open_pair(tmp_path_factory.mktemp("spark-like"), base,
                          nb.with_rows(base, person), target=spark)
    yield opened
    opened.close()


def test_a_long_value_is_matched_in_seconds(spark, pair):
    """Spark's own LIKE ran past this timeout (and never ended: a cancelled task does not
    stop a regex)."""
    metadata = nb.metadata(pair.folders[1])
    with dpsql.connect(spark, metadata=metadata, ledger=":memory:", timeout=120) as con:
        assert con.execute(STATEMENTS[0], epsilon=1).fetchall()


def test_like_keeps_the_contract_on_spark(pair):
    assert nb.contract([pair], STATEMENTS) == [["released"]] * len(STATEMENTS)
