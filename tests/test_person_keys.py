"""GROUP BY keys of one value a person: a statement whose every key reads only columns that
hold one value for all of a person's rows (a table of one row a person joined on the unit, a
subquery grouped by the unit, the unit itself) puts each person in one group, so its L0 is 1
whatever the tables allow (``select._one_group``).

- the noise scale drops by the tables' L0 (or the number of cells, if fewer), and explain
  shows the statement's L0 of 1 and why;
- a key that reads a column of several values a person keeps the tables' L0;
- at a huge ε the answers equal pandas' on data as declared (nothing dropped);
- the neighbour contract holds on D and D′ for adversaries whose row of the persons table is
  repeated with every key value (so their joined rows fall in many groups) or holds extreme
  values, since the per-person pass keeps one group of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path[:0] = [str(Path(__file__).parent / "fuzz")]

import neighbours as nb  # noqa: E402

import dpsql  # noqa: E402
from dpsql.compile import compile_statement  # noqa: E402
from dpsql.parse import parse_one  # noqa: E402

BANDS = ["a", "b", "c", "d", "e"]
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
L0, LINF = 4, 3
PEOPLE = 60
JOIN = "FROM visits v JOIN persons p ON v.uid = p.uid"
# statements whose keys all hold one value a person
PERSONAL = [
    f"SELECT p.band, COUNT(*) AS n, SUM(v.amount) AS s {JOIN} GROUP BY p.band",
    (f"SELECT p.age // 10 * 10 AS decade, AVG(v.amount) AS a, COUNT(*) AS n {JOIN} "
     "GROUP BY decade"),
    (f"SELECT p.band, CASE WHEN p.age < 40 THEN 'young' ELSE 'old' END AS g, COUNT(*) AS n "
     f"{JOIN} GROUP BY 1, 2"),
    ("WITH k AS (SELECT uid, COUNT(*) AS c FROM visits GROUP BY uid) SELECT CASE WHEN k.c > 1 "
     "THEN 'many' ELSE 'one' END AS busy, SUM(v.amount) AS s FROM visits v JOIN k "
     "ON v.uid = k.uid GROUP BY busy"),
    ("SELECT t.band, COUNT(*) AS n FROM (SELECT v.uid, p.band, v.amount FROM visits v "
     "JOIN persons p ON v.uid = p.uid) t GROUP BY t.band"),
    # a public range of the unit: one value a person too
    "SELECT LEAST(GREATEST(uid, 0), 9) AS b, SUM(amount) AS s FROM visits GROUP BY b",
]


def tables(people: int = PEOPLE, seed: int = 3) -> dict[str, pd.DataFrame]:
    """persons: one row a person; visits: 1 to L∞ rows a person, so nothing is dropped."""
    rng = np.random.default_rng(seed)
    persons = pd.DataFrame({"uid": range(people), "band": rng.choice(BANDS, people),
                            "age": rng.integers(18, 90, people),
                            "zip": rng.choice(["z1", "z2", "z3"], people)})
    uid = np.repeat(np.arange(people), rng.integers(1, LINF + 1, people))
    visits = pd.DataFrame({"uid": uid, "day": rng.choice(DAYS, uid.size),
                           "amount": np.round(rng.uniform(0, 100, uid.size), 2)})
    return {"persons": persons, "visits": visits}


def metadata(folder: Path) -> dict:
    return {"name": "persons", "budget": {"epsilon": 1e15, "delta": 0.5}, "tables": {
        "persons": {"source": str(folder / "persons.csv"), "privacy_unit": "uid",
                    "max_groups_per_unit": 1, "max_rows_per_group": 1, "csv": {"null": nb.NULL},
                    "columns": {"uid": "int", "band": {"type": "text", "values": BANDS},
                                "age": {"type": "int", "lower": 18, "upper": 90},
                                "zip": "text"}},
        "visits": {"source": str(folder / "visits.csv"), "privacy_unit": "uid",
                   "max_groups_per_unit": L0, "max_rows_per_group": LINF,
                   "csv": {"null": nb.NULL},
                   "columns": {"uid": "int", "day": {"type": "text", "values": DAYS},
                               "amount": {"type": "float", "lower": 0, "upper": 100}}}}}


def connect(folder: Path, frames: dict[str, pd.DataFrame]) -> dpsql.Connection:
    nb.write_database(folder, frames)
    return dpsql.connect(metadata=metadata(folder), ledger=folder / "ledger.sqlite",
                         insecure_seed=11)


@pytest.fixture
def con(tmp_path):
    connection = connect(tmp_path / "d", tables())
    yield connection
    connection.close()


def explained(con: dpsql.Connection, sql: str) -> dict:
    return con.explain(sql, epsilon=1)["statements"][0]


@pytest.mark.parametrize("sql", PERSONAL)
def test_keys_of_one_value_a_person_count_one_group(con, sql):
    """Each count or sum is noised for one group a person: its sensitivity is L∞ times the
    value bound, where the tables' L0 = 4 made it 4 times that."""
    planned = explained(con, sql)
    assert planned["contribution"]["max_groups_per_unit"] == 1
    counts = [a for a in planned["aggregates"] if a["part"] == "count"]
    sums = [a for a in planned["aggregates"] if a["part"] == "sum"]
    assert all(a["sensitivity"] == LINF for a in counts)
    assert all(a["sensitivity"] in (LINF * 100, LINF * 50) for a in sums)  # AVG's is centred
    checked = compile_statement(parse_one(sql), con.catalog)
    assert checked.table.max_groups_per_unit == 1
    assert "one value a person" in checked.bounds_why and f"allow {L0}" in checked.bounds_why


def test_the_reason_names_the_columns_read(con):
    checked = compile_statement(parse_one(PERSONAL[1]), con.catalog)
    assert "(p.age)" in checked.bounds_why
    assert explained(con, PERSONAL[1])["contribution"]["why"] == checked.bounds_why


@pytest.mark.parametrize("sql", [
    f"SELECT p.band, v.day, COUNT(*) AS n {JOIN} GROUP BY p.band, v.day",
    f"SELECT v.day, COUNT(*) AS n {JOIN} GROUP BY v.day",
    f"SELECT p.band || v.day AS k, COUNT(*) AS n {JOIN} GROUP BY k",
])
def test_a_key_of_several_values_a_person_keeps_the_tables_l0(con, sql):
    planned = explained(con, sql)
    assert planned["contribution"]["max_groups_per_unit"] == L0
    assert {a["sensitivity"] for a in planned["aggregates"]} == {L0 * LINF}
    assert compile_statement(parse_one(sql), con.catalog).bounds_why is None


def test_a_table_of_persons_alone_is_unchanged(con):
    planned = explained(con, "SELECT band, COUNT(*) AS n FROM persons GROUP BY band")
    assert planned["contribution"]["max_groups_per_unit"] == 1
    assert compile_statement(parse_one("SELECT band, COUNT(*) AS n FROM persons GROUP BY band"),
                             con.catalog).bounds_why is None


def test_answers_equal_the_truth_at_a_huge_epsilon(con):
    """Data as declared: each person's rows are in one group, and nothing is dropped."""
    frames = tables()
    joined = frames["visits"].merge(frames["persons"], on="uid")
    truth = joined.groupby("band").agg(n=("uid", "size"), s=("amount", "sum"))
    cursor = con.cursor()
    cursor.execute(PERSONAL[0], epsilon=1e9)
    got = {band: (n, s) for band, n, s in cursor.fetchall()}
    assert set(got) == set(BANDS)
    for band in BANDS:
        n, s = truth.loc[band] if band in truth.index else (0, 0.0)
        assert got[band][0] == n
        assert got[band][1] == pytest.approx(s, abs=0.01)
    joined["decade"] = joined["age"] // 10 * 10
    cursor.execute(PERSONAL[1], epsilon=1e9)
    counts = {decade: n for decade, _, n in cursor.fetchall()}
    expected = joined.groupby("decade").size()
    assert {k: v for k, v in counts.items() if v} == expected.to_dict()


def adversary(uid: int, *, ages: list, bands: list) -> dict[str, pd.DataFrame]:
    """A person whose persons row is repeated once per band (their joined rows fall in every
    group) and who has hundreds of visits on every day."""
    rows = len(bands)
    persons = pd.DataFrame({"uid": [str(uid)] * rows, "band": bands,
                            "age": [ages[i % len(ages)] for i in range(rows)],
                            "zip": ["adversary-" + "x" * 3000] * rows}, dtype=object)
    visits = pd.DataFrame({"uid": [str(uid)] * 300, "day": [DAYS[i % 7] for i in range(300)],
                           "amount": [["100", "0", "nan", "1e20"][i % 4] for i in range(300)]},
                          dtype=object)
    return {"persons": persons, "visits": visits}


TARGET = PEOPLE + 1  # absent from D
ADVERSARIES = [
    adversary(TARGET, ages=["89"], bands=BANDS),
    adversary(TARGET, ages=[str(nb.BIG), None, "18", "-5", "90"], bands=[*BANDS, None]),
    adversary(nb.SMALL, ages=["30"], bands=["a"] * 4),  # one row repeated
]


@pytest.fixture
def pairs(tmp_path):
    opened = []
    base = tables()
    for index, extra in enumerate(ADVERSARIES):
        root = tmp_path / f"adversary{index}"
        d, d_prime = connect(root / "d", base), connect(root / "d_prime",
                                                        nb.with_rows(base, extra))
        opened.append(nb.Pair(d, d_prime, folders=(root / "d", root / "d_prime")))
    yield opened
    for pair in opened:
        pair.close()


def test_the_neighbour_contract_holds_for_a_person_in_many_groups(pairs):
    outcomes = nb.contract(pairs, [
        *PERSONAL,
        (f"SELECT p.band, COUNT(DISTINCT v.uid) AS u, MEDIAN(v.amount) AS m {JOIN} "
         "GROUP BY p.band"),
        (f"SELECT p.band, COUNT(DISTINCT v.day) AS d, VAR_POP(v.amount) AS x {JOIN} "
         "GROUP BY p.band"),
    ])
    assert all(row == ["released"] * len(pairs) for row in outcomes), outcomes


def test_the_neighbour_contract_holds_for_a_remainder_of_the_unit_and_a_clamped_count(pairs):
    """uid % 5 lies in [-4, 4] whatever uid (the adversaries' uids include -2^63), and a
    COUNT of a person's rows in [0, 50] under LEAST(c, 50) alone."""
    per_person = "WITH k AS (SELECT uid, COUNT(*) AS c FROM visits GROUP BY uid) "
    outcomes = nb.contract(pairs, [
        "SELECT uid % 5 AS b, COUNT(*) AS n, SUM(amount) AS s FROM visits GROUP BY b",
        "SELECT SUM(uid % 7) AS s, AVG(uid % 7) AS a FROM visits",
        per_person + "SELECT AVG(LEAST(c, 50)) AS a, SUM(LEAST(c, 50)) AS s FROM k",
        per_person + "SELECT LEAST(k.c, 3) AS b, SUM(v.amount) AS s FROM visits v JOIN k "
        "ON v.uid = k.uid GROUP BY b",
    ])
    assert all(row == ["released"] * len(pairs) for row in outcomes), outcomes


def test_the_neighbour_contract_holds_for_private_keys(pairs):
    outcomes = nb.contract(pairs, [f"SELECT p.zip, COUNT(*) AS n {JOIN} GROUP BY p.zip"],
                           delta=1e-6)
    assert outcomes == [["released"] * len(pairs)]


def test_a_public_tables_column_is_not_one_value_a_person(tmp_path):
    """A public join can repeat a person's row (a band with two labels, adversary round P):
    a key read from the public table counted one group a person, and kept one label of each
    person's two; a key of the person's own columns still counts one group."""
    frames = tables()
    nb.write_database(tmp_path, frames)
    pd.DataFrame({"band": [b for b in BANDS for _ in range(2)],
                  "label": ["x", "y"] * len(BANDS)}).to_csv(tmp_path / "labels.csv", index=False)
    meta = metadata(tmp_path)
    meta["tables"]["labels"] = {"source": str(tmp_path / "labels.csv"), "public": True,
                                "columns": {"band": {"type": "text", "values": BANDS},
                                            "label": {"type": "text", "values": ["x", "y"]}}}
    joined = ("FROM visits v JOIN (SELECT p.uid, p.band, l.label FROM persons p JOIN labels l "
              "ON p.band = l.band) x ON v.uid = x.uid")
    with dpsql.connect(metadata=meta, ledger=":memory:", insecure_seed=1) as con:
        by_label = f"SELECT x.label, COUNT(*) AS n {joined} GROUP BY x.label"
        assert explained(con, by_label)["contribution"]["max_groups_per_unit"] == L0
        by_band = f"SELECT x.band, COUNT(*) AS n {joined} GROUP BY x.band"
        assert explained(con, by_band)["contribution"]["max_groups_per_unit"] == 1
        rows = dict(con.execute(by_label, epsilon=1e9).fetchall())
    assert rows == {"x": len(frames["visits"]), "y": len(frames["visits"])}
