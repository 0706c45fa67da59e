"""GROUP BY keys read from one public table reference take that table's distinct tuples of
them as their joint domain, not the product of their domains (``select._key_tuples``,
``CheckedQuery.key_tuples``).

- MovieLens' GROUP BY i.item, i.title over the ratings joined with the public items, WHERE
  i.item <= 6, releases the 6 films SQL gives (9,984 cells before: 6 items × 1,664 titles);
  GROUP BY i.item, i.title, i.release answers 1,681 films where the product's 671,723,520
  cells were refused; a private key with declared values (r.rating) keeps the product with
  the tuples; the ratings' item entry (100 × 1) applies to i.item, i.title where ON equates
  i.item to r.item and the catalogue holds an item once;
- the tuples are read from the public table, narrowed by the WHERE conjuncts reading it
  alone, and beside a LEFT JOIN include the keys of its row of NULLs; one key takes them
  where such a conjunct narrows it (GROUP BY i.title WHERE i.Comedy = 1: 502 titles of
  1,664), and a WHERE that keeps none of its rows is refused uncharged;
- the neighbour contract holds on DuckDB (the pivoted plan: 5 tuples, 25 cells before) and
  PostgreSQL for a person with hundreds of rows in regions absent from the public table.
"""

# ruff: noqa: F811 (the imported server fixtures are requested by name as parameters)

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest
import yaml
from conftest import require_dataset

sys.path[:0] = [str(Path(__file__).parent / "fuzz"), str(Path(__file__).parent / "backends")]

import neighbours as nb  # noqa: E402
from servers import databases  # noqa: E402, F401 (fixture)
from test_neighbours_on_postgresql import (  # noqa: E402
    neighbour_fixtures,
    pairs,  # noqa: F401 - the fixture
)

import dpsql  # noqa: E402

META = Path(__file__).parents[1] / "data" / "datasets" / "movielens.yaml"
FILMS = ("SELECT i.title, i.item, COUNT(*) AS n FROM ratings r JOIN items i "
         "ON r.item = i.item WHERE i.item <= 6 GROUP BY i.item, i.title")
RELEASES = ("SELECT i.item, i.title, i.release, COUNT(*) AS n FROM ratings r JOIN items i "
            "ON r.item = i.item GROUP BY i.item, i.title, i.release")
BY_RATING = ("SELECT i.item, i.title, r.rating, COUNT(*) AS n FROM ratings r JOIN items i "
             "ON r.item = i.item WHERE i.item IN (1, 2) GROUP BY i.item, i.title, r.rating")
COMEDIES = ("SELECT i.title, COUNT(*) AS n FROM ratings r JOIN items i ON r.item = i.item "
            "WHERE i.Comedy = 1 GROUP BY i.title")
EXACT = 1e7  # ε at which the noise of a count is far below 1


@pytest.fixture(scope="module")
def movielens():
    """An analyst connection on the shipped MovieLens metadata with a large budget, and the
    ml-100k folder (skipped when the shared data sets are absent)."""
    folder = require_dataset("ml-100k/u.item").parent
    meta = yaml.safe_load(META.read_text())
    meta["budget"]["epsilon"] = 1e12
    for table in meta["tables"].values():
        table["source"] = table["source"].replace("${DPSQL_DATASETS}/ml-100k", str(folder))
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=5) as con:
        yield con, folder


def _planned(con, sql: str):
    return con._engine.plan(sql, epsilon=1).release.statements[0]


def _films(folder: Path, where: str) -> set[tuple]:
    """(item, title) of the catalogue's films that ``where`` keeps, read by DuckDB."""
    names = yaml.safe_load(META.read_text())["tables"]["items"]["csv"]["names"]
    rows = duckdb.connect().execute(
        f"SELECT DISTINCT item, title FROM read_csv('{folder}/u.item', delim = '|', "
        f"header = false, encoding = 'latin-1', names = {names}) WHERE {where}").fetchall()
    return set(rows)


def test_keys_of_one_public_row_release_its_films_not_the_product(movielens):
    con, folder = movielens
    plan = _planned(con, FILMS)
    assert plan.checked.cells == 6  # 9,984 before
    [group] = plan.checked.key_tuples
    assert (group.keys, len(group.rows)) == ((0, 1), 6)
    assert con.cursor().explain(FILMS)["statements"][0]["key_tuples"] == [
        {"keys": ["item", "title"], "tuples": 6,
         "source": "the distinct rows of public table items, those WHERE keeps"}]
    cur = con.cursor().execute(FILMS, epsilon=1)
    assert {(item, title) for title, item, _ in cur.fetchall()} == _films(folder, "item <= 6")


def test_three_keys_of_the_catalogue_answer_where_the_product_was_refused(movielens):
    con, folder = movielens
    plan = _planned(con, RELEASES)  # 1,682 × 1,664 × 241 cells: MAX_DOMAIN_CELLS before
    assert plan.checked.cells == 1681 == len(_films(folder, "release IS NOT NULL"))
    rows = con.cursor().execute(RELEASES, epsilon=1).fetchall()
    assert len(rows) == 1681 and len({(i, t, r) for i, t, r, _ in rows}) == 1681


def test_a_private_key_keeps_the_product_with_the_tuples(movielens):
    con, _ = movielens
    plan = _planned(con, BY_RATING)
    assert plan.checked.cells == 2 * 5
    rows = con.cursor().execute(BY_RATING, epsilon=EXACT).fetchall()
    assert [(i, r) for i, _, r, _ in rows] == [(i, r) for i in (1, 2) for r in range(1, 6)]


def test_one_key_takes_the_values_of_the_rows_the_where_keeps(movielens):
    """GROUP BY i.title alone, WHERE on another column of items: the 502 comedies' titles
    (all 1,664 titles were released before, 1,162 of them noisy zeros)."""
    con, folder = movielens
    titles = {title for _, title in _films(folder, "Comedy = 1")}
    assert _planned(con, COMEDIES).checked.cells == len(titles) == 502
    assert {title for title, _ in con.cursor().execute(COMEDIES, epsilon=1).fetchall()} == \
        titles


def test_the_item_entry_bounds_item_and_title_of_one_catalogue_row(movielens):
    """ON r.item = i.item and one row an item: a person's ratings of an item lie in one
    (item, title) cell, so the entry's 100 × 1 applies (the table's bounds before, then 5 ×
    100): COUNT's sensitivity is 6 over 6 films (500 before) and Star Wars counts its 583
    ratings."""
    con, _ = movielens
    plan = _planned(con, FILMS)
    assert (plan.checked.table.max_groups_per_unit, plan.checked.table.max_rows_per_group) == \
        (100, 1)
    assert plan.parts[0].sensitivity == 6
    star_wars = FILMS.replace("i.item <= 6", "i.title LIKE 'Star Wars%'")
    assert con.cursor().execute(star_wars, epsilon=EXACT).fetchall() == \
        [("Star Wars (1977)", 50, 583)]


# ---- the neighbour contract on the harness's public regions (each id twice) -----------------

BY_REGION = ("SELECT r.region_id, r.name, COUNT(*) AS n, SUM(v.amount) AS s FROM visits v "
             "JOIN regions r ON v.region_id = r.region_id GROUP BY r.region_id, r.name")
CONTRACT = [
    BY_REGION,
    "SELECT r.name, r.region_id, AVG(v.amount) AS a FROM visits v JOIN regions r "
    "ON v.region_id = r.region_id WHERE r.region_id < 3 GROUP BY r.name, r.region_id",
    "SELECT v.day, r.region_id, r.name, COUNT(*) AS n FROM visits v JOIN regions r "
    "ON v.region_id = r.region_id GROUP BY v.day, r.region_id, r.name",
    "SELECT COALESCE(r.name, 'none') AS nm, COALESCE(r.region_id, -1) AS rid, COUNT(*) AS n "
    "FROM visits v LEFT JOIN regions r ON v.region_id = r.region_id GROUP BY 1, 2",
    "SELECT r.region_id, r.name, COUNT(DISTINCT v.day) AS d FROM visits v JOIN regions r "
    "ON v.region_id = r.region_id GROUP BY r.region_id, r.name",
    "SELECT r.name, SUM(v.amount) AS s FROM visits v JOIN regions r "
    "ON v.region_id = r.region_id WHERE r.region_id IN (1, 3) GROUP BY r.name",
]
CELLS = [5, 3, 7 * 5, 6, 5, 2]  # the products: 25, 15, 175, 36, 25, and the 5 names


duck_pairs, extra_on_postgres, neighbours = neighbour_fixtures(
    "joint-domains", nb.heavy_in_every_region)


def test_joint_domains_keep_the_neighbour_contract(neighbours):
    outcomes = nb.contract(neighbours, CONTRACT)
    assert all(outcome == "released" for row in outcomes for outcome in row), outcomes
    pair = neighbours[-1]
    for sql, cells in zip(CONTRACT, CELLS, strict=True):
        plans = nb.plan_both(pair, sql, epsilon=1)
        assert [p.release.statements[0].checked.cells for p in plans] == [cells] * 2, sql
        answers = nb.execute_both(pair, sql, epsilon=1)
        assert [len(a.sets[0]) for a in answers] == [cells] * 2, sql


def test_a_where_keeping_no_public_row_is_refused_uncharged(neighbours):
    """No region passes the WHERE: every cell is empty on every database (the product's 5
    names were released as noise before); refused alike on D and D′, nothing charged."""
    sql = ("SELECT r.name, COUNT(*) AS n FROM visits v JOIN regions r "
           "ON v.region_id = r.region_id WHERE r.region_id > 100 GROUP BY r.name")
    assert nb.contract(neighbours, [sql]) == [["programming"] * len(neighbours)]


def test_the_pivoted_plan_reads_the_tuples(duck_pairs):
    """5 tuples fit one row a person (25 cells did not): a row's cell is its tuple's index."""
    plan = nb.plan_both(duck_pairs[-1], BY_REGION, epsilon=1)[0].release.statements[0]
    assert "__in_cells" in plan.exact_query.sql
    assert "CASE WHEN __k0 = 0 AND __k1 = 'North' THEN 0" in plan.exact_query.sql


@pytest.mark.parametrize("options", nb.OPTIONS, ids=str)
def test_bounds_in_all_gaussian_noise_and_replace_keep_the_contract(tmp_path, options):
    nb.released_under(tmp_path, nb.heavy_in_every_region(), options, CONTRACT[:2])
