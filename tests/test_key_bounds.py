"""Per-key contribution bounds (``key_bounds`` in the metadata, docs/metadata.md#key-bounds):
a GROUP BY whose keys are exactly an entry's columns (plain, all of them; beside keys of one
value a person) uses the entry's L0 and L∞ instead of the table's (``select._key_bound``).

- the entry is used for matching keys, through a subquery, a CTE, a public join and a table
  of persons joined on the unit, and not for a superset, a subset, an expression of the
  columns, another column or no GROUP BY; explain says why; OPTIONS tighten the entry's;
- at a huge ε a GROUP BY item over data as declared equals pandas' counts (the table's L0 = 3
  kept 3 items a person);
- the per-person pass enforces the entry (exact values, via the neighbour harness): a person
  with 3 rows in one item counts 1 there (L∞ = 1), one with 300 items counts in exactly 200
  (L0 = 200), and every noised part moves by at most its sensitivity on DuckDB and
  PostgreSQL, for those adversaries and one of extreme values;
- an invalid entry is a coded CatalogError with a hint.
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402
from test_neighbours_on_postgresql import _load  # noqa: E402

import dpsql  # noqa: E402
from dpsql.catalog import load_catalog  # noqa: E402

L0, LINF = 3, 5  # the table's bounds
ITEM_L0, ITEM_LINF = 200, 1  # the entry's for GROUP BY item
PAIR_L0, PAIR_LINF = 4, 2  # the entry's for GROUP BY item, rating
ITEMS = 400
BANDS = ["a", "b", "c"]
PEOPLE = 40
TARGET = PEOPLE + 1  # the adversary: absent from D
JOIN = "FROM ratings r JOIN persons p ON r.uid = p.uid"
PUBLIC = "FROM ratings r JOIN genres g ON r.item = g.item"


def tables(people: int = PEOPLE, seed: int = 4) -> dict[str, pd.DataFrame]:
    """ratings: each person rates 1 to 20 distinct items once (as the entry declares);
    persons: one row a person; genres: a public table of every item."""
    rng = np.random.default_rng(seed)
    rows = [(u, int(item), int(rng.integers(1, 6))) for u in range(people)
            for item in rng.choice(np.arange(1, ITEMS + 1), rng.integers(1, 21), replace=False)]
    ratings = pd.DataFrame(rows, columns=["uid", "item", "rating"])
    persons = pd.DataFrame({"uid": range(people), "band": rng.choice(BANDS, people)})
    genres = pd.DataFrame({"item": range(1, ITEMS + 1),
                           "genre": [["drama", "comedy"][i % 2] for i in range(ITEMS)]})
    return {"ratings": ratings, "persons": persons, "genres": genres}


def metadata(folder: Path | None, **ratings) -> dict:
    """The catalogue (sources in ``folder``; none for PostgreSQL); ``ratings`` overrides keys
    of the ratings table."""
    meta = {"name": "key_bounds", "budget": {"epsilon": 1e15, "delta": 0.5}, "tables": {
        "ratings": {"privacy_unit": "uid", "max_groups_per_unit": L0, "max_rows_per_group": LINF,
                    "key_bounds": [
                        {"columns": ["item"], "max_groups_per_unit": ITEM_L0,
                         "max_rows_per_group": ITEM_LINF},
                        {"columns": ["Rating", "item"], "max_groups_per_unit": PAIR_L0,
                         "max_rows_per_group": PAIR_LINF}],
                    "columns": {"uid": "int", "item": {"type": "int", "lower": 1, "upper": ITEMS},
                                "rating": {"type": "int", "lower": 1, "upper": 5}}},
        "persons": {"privacy_unit": "uid", "max_groups_per_unit": 1, "max_rows_per_group": 1,
                    "columns": {"uid": "int", "band": {"type": "text", "values": BANDS}}},
        "genres": {"public": True, "columns": {"item": "int", "genre": "text"}}}}
    meta["tables"]["ratings"].update(ratings)
    if folder is not None:
        for name, table in meta["tables"].items():
            table.update(source=str(folder / f"{name}.csv"), csv={"null": nb.NULL})
    return meta


def connect(folder: Path, frames: dict[str, pd.DataFrame], **ratings) -> dpsql.Connection:
    nb.write_database(folder, frames)
    return dpsql.connect(metadata=metadata(folder, **ratings), ledger=folder / "ledger.sqlite",
                         insecure_seed=11)


@pytest.fixture(scope="module")
def con(tmp_path_factory):
    connection = connect(tmp_path_factory.mktemp("key-bounds"), tables())
    yield connection
    connection.close()


def explained(con: dpsql.Connection, sql: str) -> dict:
    return con.explain(sql, epsilon=1)["statements"][0]


def bounds(con: dpsql.Connection, sql: str) -> tuple[int, int]:
    contribution = explained(con, sql)["contribution"]
    return contribution["max_groups_per_unit"], contribution["max_rows_per_group"]


# ---- which statements use an entry -----------------------------------------------------------

ITEM_KEYS = [
    "SELECT item, COUNT(*) AS n FROM ratings GROUP BY item",
    "SELECT item AS i, AVG(rating) AS a FROM ratings GROUP BY i",
    "SELECT COUNT(*) AS n, item FROM ratings GROUP BY 2",
    ("SELECT t.i, COUNT(*) AS n FROM (SELECT item AS i, rating FROM ratings WHERE rating > 1) "
     "t GROUP BY t.i"),
    ("WITH t AS (SELECT uid, item, item AS again FROM ratings) SELECT again, COUNT(*) AS n "
     "FROM t GROUP BY again"),
    f"SELECT r.item, COUNT(*) AS n {PUBLIC} GROUP BY r.item",
    # the public key that ON equates to the entry's column holds its values
    f"SELECT g.item, COUNT(*) AS n {PUBLIC} GROUP BY g.item",
    ("SELECT g.item, COUNT(*) AS n FROM ratings r JOIN genres g ON g.item = r.item "
     "AND g.genre = 'drama' GROUP BY g.item"),
    # r.item holds g.item's value on every row of the INNER JOIN: the genres' (item, genre)
    # tuples, one an item, as GROUP BY g.item, g.genre reads them
    f"SELECT r.item, g.genre, COUNT(*) AS n {PUBLIC} GROUP BY r.item, g.genre",
    f"SELECT r.item, SUM(r.rating) AS s, COUNT(*) AS n {JOIN} GROUP BY r.item",
    # a key of one value a person splits no person's group
    f"SELECT r.item, p.band, COUNT(*) AS n {JOIN} GROUP BY r.item, p.band",
]
PAIR_KEYS = [
    "SELECT rating, item, COUNT(*) AS n FROM ratings GROUP BY rating, item",
    ("SELECT t.a, t.rating, t.b, COUNT(*) AS n FROM (SELECT item AS a, rating, item AS b "
     "FROM ratings) t GROUP BY t.a, t.rating, t.b"),
]
TABLE_BOUNDS = [
    "SELECT COUNT(*) AS n FROM ratings",
    # a WHERE that keeps no fewer cells than L∞ (5 items), every item or another column
    "SELECT COUNT(*) AS n FROM ratings WHERE item BETWEEN 3 AND 7",
    "SELECT COUNT(*) AS n FROM ratings WHERE item > 0",
    "SELECT COUNT(*) AS n FROM ratings WHERE rating = 5",
    "SELECT COUNT(*) AS n FROM ratings WHERE item = 50 OR rating = 5",
    # NULL items are kept too: a cell beyond item 50 (it counted 1 of a person's 3 rows)
    "SELECT COUNT(*) AS n FROM ratings WHERE item = 50 OR item IS NULL",
    "SELECT rating, COUNT(*) AS n FROM ratings GROUP BY rating",  # a subset of the pair
    "SELECT item % 10 AS b, COUNT(*) AS n FROM ratings GROUP BY b",
    "SELECT item + 0 AS i, COUNT(*) AS n FROM ratings GROUP BY i",
    "SELECT t.i, COUNT(*) AS n FROM (SELECT item + 0 AS i FROM ratings) t GROUP BY t.i",
    f"SELECT g.genre, COUNT(*) AS n {PUBLIC} GROUP BY g.genre",
    # ON equates an expression of the column, not the column
    ("SELECT g.item, COUNT(*) AS n FROM ratings r JOIN genres g ON r.item + 0 = g.item "
     "GROUP BY g.item"),
    # two tables of several rows a person: the smaller bounds, no entry
    "SELECT a.item, COUNT(*) AS n FROM ratings a JOIN ratings b ON a.uid = b.uid GROUP BY a.item",
    # grouped by the unit and the item: rows of (person, item), under the table's bounds
    ("SELECT t.item, COUNT(*) AS n FROM (SELECT uid, item, COUNT(*) AS c FROM ratings "
     "GROUP BY uid, item) t GROUP BY t.item"),
]


@pytest.mark.parametrize("sql", ITEM_KEYS)
def test_keys_of_an_entry_use_its_bounds(con, sql):
    """COUNT's sensitivity is L0·L∞ = 200 (the table's 3 × 5 made it 15)."""
    planned = explained(con, sql)
    contribution = planned["contribution"]
    assert (contribution["max_groups_per_unit"], contribution["max_rows_per_group"]) == \
        (ITEM_L0, ITEM_LINF)
    assert "key_bounds entry" in contribution["why"] and "item of table ratings" in \
        contribution["why"]
    counts = [a["sensitivity"] for a in planned["aggregates"] if a["part"] == "count"]
    assert counts and all(c == ITEM_L0 * ITEM_LINF for c in counts)


@pytest.mark.parametrize("sql", PAIR_KEYS)
def test_an_entry_of_two_columns_is_used_for_both_in_any_order(con, sql):
    assert bounds(con, sql) == (PAIR_L0, PAIR_LINF)


@pytest.mark.parametrize("sql", TABLE_BOUNDS)
def test_other_keys_use_the_tables_bounds(con, sql):
    assert bounds(con, sql) == (L0, LINF)
    assert "why" not in explained(con, sql)["contribution"]


# a WHERE that keeps k values of the item (as a top-level conjunct) and no GROUP BY, or keys of
# one value a person: a person's rows there are ≤ min(k, 200) × 1 (the table's L∞ is 5)
PINNED = {
    "SELECT COUNT(*) AS n, AVG(rating) AS a FROM ratings WHERE item = 50": 1,
    "SELECT COUNT(*) AS n FROM ratings WHERE 50 = item AND rating > 1": 1,
    "SELECT COUNT(*) AS n FROM ratings WHERE item IN (50)": 1,
    "SELECT COUNT(*) AS n FROM ratings WHERE item IN (1, 2, 2, NULL)": 2,
    "SELECT COUNT(*) AS n FROM ratings WHERE item BETWEEN 3 AND 6": 4,
    "SELECT COUNT(*) AS n, SUM(rating) AS s FROM ratings WHERE item = 50 OR item = 51": 2,
    "SELECT COUNT(*) AS n FROM (SELECT item AS i FROM ratings) t WHERE t.i = 50": 1,
    f"SELECT COUNT(*) AS n {PUBLIC} WHERE g.item = 50": 1,
    f"SELECT p.band, COUNT(*) AS n {JOIN} WHERE r.item = 50 GROUP BY p.band": 1,
}


@pytest.mark.parametrize(("sql", "rows"), PINNED.items())
def test_a_where_that_keeps_few_items_counts_a_person_with_their_rows(con, sql, rows):
    """MovieLens' WHERE item = 50 without GROUP BY ran under the table's L∞ 100 (n 473
    [0, 992]) where GROUP BY item took the entry's 1 (582 [577, 587], truth 583)."""
    planned = explained(con, sql)
    contribution = planned["contribution"]
    assert (contribution["max_groups_per_unit"], contribution["max_rows_per_group"]) == (1, rows)
    assert f"WHERE keeps {rows} value(s) of item of table ratings" in contribution["why"]
    assert f"1 group(s) × {rows} row(s)" in contribution["note"]
    counts = [a["sensitivity"] for a in planned["aggregates"] if a["part"] == "count"]
    assert counts and all(c == rows for c in counts)


def test_a_table_of_persons_joined_keeps_one_group_a_person(con):
    """Keys of one value a person alone still count each person once, entry or not."""
    sql = f"SELECT p.band, COUNT(*) AS n {JOIN} GROUP BY p.band"
    assert bounds(con, sql) == (1, LINF)


def test_options_tighten_the_entrys_bounds(con):
    """OPTIONS may lower the entry's L0 (beyond the table's 3, up to 200), never raise it."""
    sql = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(max_groups_contributed={}) item, " \
        "COUNT(*) AS n FROM ratings GROUP BY item"
    planned = explained(con, sql.format(50))
    assert planned["contribution"]["max_groups_per_unit"] == 50
    assert planned["aggregates"][0]["sensitivity"] == 50
    with pytest.raises(dpsql.ProgrammingError, match="between 1 and the declared"):
        explained(con, sql.format(ITEM_L0 + 1))


def test_a_superset_on_a_table_of_one_row_a_person_keeps_the_tables_bounds(tmp_path):
    """Every column of a table declared 1 × 1 is one value a person, so GROUP BY item, rating
    took the item entry's bounds (200 × 1 here, 15× the noise in an adversary's case) where
    a superset of an entry's columns gets the table's."""
    with connect(tmp_path, tables(), max_groups_per_unit=1, max_rows_per_group=1) as one:
        assert bounds(one, ITEM_KEYS[0]) == (ITEM_L0, ITEM_LINF)
        assert bounds(one, "SELECT item, rating, COUNT(*) AS n FROM ratings "
                           "GROUP BY item, rating") == (PAIR_L0, PAIR_LINF)
        assert bounds(one, "SELECT item, rating + 0 AS r, COUNT(*) AS n FROM ratings "
                           "GROUP BY item, r") == (1, 1)
        # a key of the unit splits no one's group: the entry still holds
        assert bounds(one, "SELECT item, uid % 2 AS h, COUNT(*) AS n FROM ratings "
                           "GROUP BY item, h") == (ITEM_L0, ITEM_LINF)


def test_rows_per_unit_still_caps_a_persons_rows(tmp_path):
    with connect(tmp_path, tables(), max_rows_per_unit=30) as capped:
        planned = explained(capped, ITEM_KEYS[0])
    assert planned["contribution"]["max_groups_per_unit"] == ITEM_L0
    assert planned["aggregates"][0]["sensitivity"] == 30


def test_tuned_bounds_replace_the_entrys(con):
    """tune= ran GROUP BY item under the entry's 200 × 1 rather than the bounds it chose
    (2 × 2): the tuned catalogue kept the entry, whose bounds replace the table's."""
    from types import SimpleNamespace

    from dpsql.autotune import with_bounds
    from dpsql.compile import compile_statement
    from dpsql.parse import parse_one

    chosen = {"max_groups_per_unit": 2, "max_rows_per_group": 2}
    tuned = with_bounds(con.catalog, SimpleNamespace(
        table="ratings", metadata={"tables": {"ratings": chosen}}))
    checked = compile_statement(parse_one(ITEM_KEYS[0]), tuned)
    assert (checked.table.max_groups_per_unit, checked.table.max_rows_per_group) == (2, 2)
    assert checked.bounds_why is None


def test_tune_starts_from_the_entrys_bounds_and_says_it_is_for_them(tmp_path):
    """tune anchored its draws at the table's L∞ (100, as MovieLens declares), where the
    statement's entry declares 1: MovieLens' six-item GROUP BY item was answered under
    L∞ 609 by tune=, and dpsql tune --group-by item proposed table-wide bounds silently."""
    sql = "SELECT item, COUNT(*) AS n FROM ratings WHERE item <= 50 GROUP BY item"
    with connect(tmp_path, tables(), max_rows_per_group=100) as wide:
        cursor = wide.cursor()
        chosen = [cursor.execute(sql, epsilon=1, tune=0.5).tuned_bounds["max_rows_per_group"]
                  for _ in range(4)]
        notes = wide.tune("ratings", epsilon=1, group_by=["item"], columns=[]).notes
    assert max(chosen) <= 2, chosen
    [note] = [n for n in notes if n.startswith("this GROUP BY is answered under other bounds")]
    assert "key_bounds entry gives L0 = 200" in note


def test_a_where_pinned_statement_is_bounded_per_query_under_snapshots(tmp_path):
    """A snapshot keeps a person's rows before any WHERE: under WHERE item = 50's L∞ of 1 it
    kept one rating of each user's all, and MovieLens' count of item 50 came out 9 of 583."""
    frames = tables()
    nb.write_database(tmp_path, frames)
    item = int(frames["ratings"]["item"].mode()[0])
    truth = int((frames["ratings"]["item"] == item).sum())
    with dpsql.connect(metadata=metadata(tmp_path), ledger=":memory:", insecure_seed=11,
                       bounding="snapshot") as snapshots:
        [(count,)] = snapshots.execute(f"SELECT COUNT(*) AS n FROM ratings WHERE item = {item}",
                                       epsilon=1e9).fetchall()
    assert count == truth


def test_answers_equal_the_truth_at_a_huge_epsilon(con):
    """Every person rates at most 20 items once: nothing is dropped under 200 × 1, where the
    table's 3 groups kept 3 items a person."""
    truth = tables()["ratings"].groupby("item").size()
    cursor = con.cursor()
    cursor.execute(ITEM_KEYS[0], epsilon=1e9)
    got = {item: n for item, n in cursor.fetchall() if n}
    assert got == truth.to_dict()
    assert sum(got.values()) == len(tables()["ratings"])


def test_the_truncation_report_measures_each_entry_under_its_bounds(tmp_path):
    """GROUP BY item drops nothing under 200 × 1; GROUP BY rating, item keeps 4 cells a person
    (an expectation: the keyed hash keeps 4 of G cells)."""
    ratings = tables()["ratings"]
    nb.write_database(tmp_path, tables())
    with dpsql.connect_custodian(metadata=metadata(tmp_path),
                                 ledger=tmp_path / "ledger.sqlite") as custodian:
        report = {(e["group"], e["bound"]): e for e in custodian.truncation_report("ratings")}
    assert report["item", "max_groups_per_unit"]["limit"] == ITEM_L0
    assert report["item", "max_rows_per_group"]["limit"] == ITEM_LINF
    assert report["item", "both"]["rows_affected"] == 0
    cells = ratings.groupby(["uid", "rating", "item"]).size().groupby("uid").agg(["size", "sum"])
    busy = cells[cells["size"] > PAIR_L0]
    expected = (busy["sum"] * (busy["size"] - PAIR_L0) / busy["size"]).sum()
    pair = report["rating, item", "max_groups_per_unit"]
    assert (pair["limit"], pair["persons_affected"]) == (PAIR_L0, len(busy))
    assert pair["rows_affected"] == pytest.approx(expected, abs=0.1)


# ---- the per-person pass enforces the entry: exact values on D and D′ ------------------------

def adversary(items: list, ratings: list, bands: list) -> dict[str, pd.DataFrame]:
    rows = len(items)
    return {"ratings": pd.DataFrame({"uid": [str(TARGET)] * rows, "item": items,
                                     "rating": [ratings[i % len(ratings)] for i in range(rows)]},
                                    dtype=object),
            "persons": pd.DataFrame({"uid": [str(TARGET)] * len(bands), "band": bands},
                                    dtype=object)}


THREE_IN_ONE = adversary(["7", "7", "7"], ["5"], ["a"])
MANY_ITEMS = adversary([str(i) for i in range(1, 301)], ["1", "5"], ["b"])
IN_ONE_ITEM = adversary(["50"] * 300, ["1", "5"], ["c"])
EXTREME = adversary([str(nb.BIG), str(nb.SMALL), None, "0", str(ITEMS + 1), "7", "7", "7",
                     *(str(i) for i in range(1, 250))],
                    [str(nb.BIG), None, "-3", "5"], [*BANDS, None])
ADVERSARIES = {"three_in_one": THREE_IN_ONE, "many_items": MANY_ITEMS,
               "in_one_item": IN_ONE_ITEM, "extreme": EXTREME}
CONTRACT = [
    *ITEM_KEYS, PAIR_KEYS[0],  # (not the other: its 400 × 5 × 400 cells take minutes)
    "SELECT item, COUNT(DISTINCT uid) AS u, VAR_POP(rating) AS v FROM ratings GROUP BY item",
    "SELECT item, MEDIAN(rating) AS m FROM ratings GROUP BY item",
    *list(PINNED)[:2], list(PINNED)[-1],
    "SELECT COUNT(*) AS n, MEDIAN(rating) AS m FROM ratings WHERE item IN (7, 50)",
]


def duckdb_pair(root: Path, extra: dict[str, pd.DataFrame]) -> nb.Pair:
    base = tables()
    d, d_prime = connect(root / "d", base), connect(root / "d_prime", nb.with_rows(base, extra))
    return nb.Pair(d, d_prime, folders=(root / "d", root / "d_prime"))


def postgres_pair(create, root: Path, extra: dict[str, pd.DataFrame]) -> nb.Pair:
    """The pair on two PostgreSQL databases (``create()`` makes each)."""
    connections = []
    base = tables()
    for side, frames in (("d", base), ("d_prime", nb.with_rows(base, extra))):
        url, folder = create(), root / side
        folder.mkdir(parents=True)
        meta = metadata(None)
        _load(url, frames, meta)
        connections.append(dpsql.connect(url, metadata=meta, insecure_seed=11,
                                         ledger=folder / "ledger.sqlite"))
    return nb.Pair(*connections, folders=(root / "d", root / "d_prime"))


@pytest.fixture(scope="module", params=["duckdb", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def pairs(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"key-bounds-{request.param}")
    if request.param == "duckdb":
        opened = {name: duckdb_pair(root / name, extra) for name, extra in ADVERSARIES.items()}
        yield opened
    else:
        with databases("dpsql_key_bounds") as create:
            opened = {name: postgres_pair(create, root / name, extra)
                      for name, extra in ADVERSARIES.items()}
            yield opened
    for pair in opened.values():
        pair.close()


def count_change(pair: nb.Pair, sql: str) -> dict:
    """The exact COUNT(*) of each item on D′ minus D, where it differs, and the count part's
    sensitivity."""
    plans = nb.plan_both(pair, sql, epsilon=1)
    statements = [plan.release.statements[0] for plan in plans]
    [part] = [p for p in statements[0].parts if p.role == "count"]
    cells = [nb.exact_cells(con, statement)[0][part.column]
             for (con, _), statement in zip(pair.sides, statements, strict=True)]
    changes = {key: cells[1].get(key, 0) - cells[0].get(key, 0)
               for key in cells[0].keys() | cells[1].keys()}
    return {key: change for key, change in changes.items() if change}, part.sensitivity


def test_three_rows_in_one_item_count_one(pairs):
    changes, sensitivity = count_change(pairs["three_in_one"], ITEM_KEYS[0])
    assert changes == {(7,): 1} and sensitivity == ITEM_L0 * ITEM_LINF


def test_a_person_in_300_items_counts_in_200(pairs):
    changes, sensitivity = count_change(pairs["many_items"], ITEM_KEYS[0])
    assert len(changes) == ITEM_L0 and set(changes.values()) == {Fraction(1)}
    assert sum(changes.values()) == sensitivity == ITEM_L0


def test_300_rows_in_the_item_a_where_keeps_count_one(pairs):
    """The adversary's 300 ratings of item 50 move the scalar count by the entry's L∞ (1),
    under WHERE item = 50 (it moved by the table's 5 before), and by 2 over two items."""
    for sql, rows in (("SELECT COUNT(*) AS n FROM ratings WHERE item = 50", 1),
                      ("SELECT COUNT(*) AS n FROM ratings WHERE item IN (7, 50)", 2)):
        changes, sensitivity = count_change(pairs["in_one_item"], sql)
        assert changes == {(): rows} and sensitivity == rows == ITEM_LINF * rows


def test_the_pair_entry_keeps_two_rows_of_four_cells(pairs):
    """(item, rating) under 4 × 2: the 300 ratings of 1 and 5 fill 300 cells, 4 kept."""
    changes, sensitivity = count_change(pairs["many_items"], PAIR_KEYS[0])
    assert len(changes) == PAIR_L0 and sensitivity == PAIR_L0 * PAIR_LINF


@pytest.mark.parametrize("sql", CONTRACT)
def test_the_neighbour_contract_holds_under_an_entry(pairs, sql):
    for pair in pairs.values():
        assert nb.check_statement(pair, sql) == "released", sql


# ---- the metadata ---------------------------------------------------------------------------

ENTRY = {"columns": ["item"], "max_groups_per_unit": 2}


@pytest.mark.parametrize(("change", "message"), [
    ({"key_bounds": {"columns": ["item"]}}, "non-empty list"),
    ({"key_bounds": []}, "non-empty list"),
    ({"key_bounds": ["item"]}, "expected a mapping"),
    ({"key_bounds": [{**ENTRY, "max_group_per_unit": 2}]}, r"unknown key\(s\)"),
    ({"key_bounds": [{"columns": ["item"]}]}, "declares neither"),
    ({"key_bounds": [{**ENTRY, "columns": "item"}]}, "list of column names"),
    ({"key_bounds": [{**ENTRY, "columns": []}]}, "list of column names"),
    ({"key_bounds": [{**ENTRY, "columns": ["genre"]}]}, "'genre' is not a declared column"),
    ({"key_bounds": [{**ENTRY, "columns": ["UID"]}]}, "privacy unit"),
    ({"key_bounds": [{**ENTRY, "columns": ["item", "ITEM"]}]}, "twice"),
    ({"key_bounds": [ENTRY, {**ENTRY, "columns": ["ITEM"]}]}, "two entries"),
    ({"key_bounds": [{**ENTRY, "max_groups_per_unit": 0}]}, "whole number ≥ 1"),
    ({"key_bounds": [{**ENTRY, "max_rows_per_group": 1.5}]}, "whole number ≥ 1"),
    ({"key_bounds": [{**ENTRY, "max_rows_per_group": True}]}, "whole number ≥ 1"),
    ({"privacy_unit": None, "max_groups_per_unit": 1, "max_rows_per_group": 1,
      "key_bounds": [ENTRY]}, "need a privacy_unit"),
])
def test_an_invalid_entry_is_a_coded_catalog_error(change, message):
    meta = metadata(None)
    meta["tables"]["ratings"].update(change)
    with pytest.raises(dpsql.CatalogError, match=message) as raised:
        load_catalog(meta)
    assert raised.value.code == "catalog" and raised.value.hint
    assert "table 'ratings': key_bounds" in str(raised.value)


def test_a_public_table_cannot_declare_an_entry():
    meta = metadata(None)
    meta["tables"]["genres"]["key_bounds"] = [ENTRY]
    with pytest.raises(dpsql.CatalogError, match="need a privacy_unit"):
        load_catalog(meta)


def test_an_entry_reads_the_declared_spelling_and_the_tables_other_bound():
    meta = metadata(None)
    meta["tables"]["ratings"]["key_bounds"] = [{"columns": ["ITEM"], "max_groups_per_unit": 9}]
    [entry] = load_catalog(meta).table("ratings").key_bounds
    assert (entry.columns, entry.max_groups_per_unit, entry.max_rows_per_group) == \
        (("item",), 9, LINF)


def test_movielens_declares_its_per_item_entry():
    meta = Path(__file__).parents[1] / "data" / "datasets" / "movielens.yaml"
    [entry] = load_catalog(meta).table("ratings").key_bounds
    assert (entry.columns, entry.max_groups_per_unit, entry.max_rows_per_group) == \
        (("item",), 100, 1)
