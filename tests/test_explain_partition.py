"""Explain reports a FILTER partition as it is (``release.filter_partition``): its classes'
L1 sensitivity is the most one class adds, as of a GROUP BY's cells, not their sum (it
said 2 for ``COUNT(*) FILTER (WHERE sex = 'Female'), COUNT(*) FILTER (WHERE sex = 'Male')``
where ``GROUP BY sex`` says 1), and it names the parts of each class and the one share of ε
every class spends at once: in the dict (``dpsql explain --json``, a server's EXPLAIN
(FORMAT JSON)) and in the text lines (``dpsql explain``, a server's EXPLAIN rows)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import catalogue

import dpsql
from dpsql import explain_text

ROOT = Path(__file__).parents[1]
SEXES = ("SELECT COUNT(*) FILTER (WHERE sex = 'Female') AS f, "
         "COUNT(*) FILTER (WHERE sex = 'Male') AS m FROM adult")
BY_SEX = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"
FEMALE, MALE = ("COUNT(CASE WHEN sex = 'Female' THEN 1 END)",
                "COUNT(CASE WHEN sex = 'Male' THEN 1 END)")


def _statement(plan: dict) -> dict:
    return plan["statements"][0]


def _explain(folder: Path, sql: str, neighbouring: str = "add_remove", **kwargs) -> dict:
    """The plan of ``sql`` on the case catalogue (Adult under row privacy) at ε 1, or at
    ``kwargs``' parameters with its metadata's entries of ``metadata=``."""
    metadata = {**catalogue(folder, neighbouring), **kwargs.pop("metadata", {})}
    with dpsql.connect(metadata=metadata, ledger=":memory:") as con:
        return con.explain(sql, **(kwargs or {"epsilon": 1}))


def test_two_classes_add_what_one_cell_does(connect):
    """Adult's row privacy: 1, as GROUP BY sex; each count in its class at the whole ε."""
    con = connect()
    plan, by_sex = con.explain(SEXES, epsilon=1), con.explain(BY_SEX, epsilon=1)
    assert plan["total_sensitivity"] == _statement(plan)["sensitivity"] == 1
    assert by_sex["total_sensitivity"] == 1
    assert _statement(plan)["filter_partition"] == {
        "classes": [[{"aggregate": FEMALE, "part": "count"}],
                    [{"aggregate": MALE, "part": "count"}]],
        "sensitivity": 1, "epsilon": 1.0}
    assert [p["filter_class"] for p in _statement(plan)["aggregates"]] == [1, 2]
    assert "filter_partition" not in _statement(by_sex)


def test_parts_outside_the_partition_add_their_own(data_dir):
    """COUNT(*) beside two classes of an AVG's sum and count: its Δ 1 plus the most a class
    adds (36.5 + 1, age in [17, 90] centred); the statement's ε is the count's plus one
    class's."""
    plan = _explain(data_dir, "SELECT COUNT(*) AS n, AVG(age) FILTER (WHERE sex = 'Female') "
                    "AS f, AVG(age) FILTER (WHERE sex = 'Male') AS m FROM adult")
    statement = _statement(plan)
    partition = statement["filter_partition"]
    assert partition["sensitivity"] == 37.5 and statement["sensitivity"] == 38.5
    assert [[m["part"] for m in members] for members in partition["classes"]] == \
        [["sum", "count"], ["sum", "count"]]
    count = statement["aggregates"][0]
    assert "filter_class" not in count
    assert count["epsilon"] + partition["epsilon"] == pytest.approx(statement["epsilon"])


@pytest.mark.parametrize(("sql", "neighbouring"), [
    # FILTERs some row meets together: the parts add up
    ("SELECT COUNT(*) FILTER (WHERE age > 30) AS a, COUNT(*) FILTER (WHERE age > 40) AS b "
     "FROM adult", "add_remove"),
    # no GROUP BY under replace: the old person in one class and the new in the other
    (SEXES, "replace"),
])
def test_no_partition_where_there_is_none(data_dir, sql, neighbouring):
    plan = _explain(data_dir, sql, neighbouring)
    assert plan["total_sensitivity"] == 2 and "filter_partition" not in _statement(plan)


def test_a_partition_beside_a_group_by_under_replace(data_dir):
    """Grouped replace: each class's count has Δ 2 (a row leaves one cell and one enters
    another), and the two classes add 2, not 4."""
    plan = _explain(data_dir, "SELECT education, " + SEXES[len("SELECT "):] +
                    " GROUP BY education", "replace")
    assert [p["sensitivity"] for p in _statement(plan)["aggregates"]] == [2, 2]
    assert plan["total_sensitivity"] == _statement(plan)["filter_partition"]["sensitivity"] == 2


def test_the_gaussian_mechanism_splits_rho_in_sequence(data_dir):
    """The partition's L1 sensitivity holds whatever the noise; under zCDP its ρ is not spent
    side by side, and the plan says so (epsilon None)."""
    plan = _explain(data_dir, SEXES, metadata={"mechanism": "gaussian"}, rho=0.1)
    assert _statement(plan)["sensitivity"] == 1
    assert _statement(plan)["filter_partition"]["epsilon"] is None
    assert "their ε in sequence" in "\n".join(explain_text.lines(
        {**plan, "fits_budget": True}, None))


def test_the_text_lines_name_the_classes_and_their_share(data_dir, tmp_path):
    """dpsql explain (and a server's EXPLAIN rows, the same lines): the total, each part's
    class and the partition's line."""
    meta = tmp_path / "meta.yaml"
    meta.write_text(yaml.safe_dump(catalogue(data_dir)))
    args = [sys.executable, "-m", "dpsql", "explain", "-", "-m", str(meta), "-e", "1"]
    text = subprocess.run(args, input=SEXES, capture_output=True, text=True, cwd=ROOT,
                          check=True).stdout
    assert "total L1 sensitivity 1\n" in text and "   sensitivity 1, ε 1, 1 group(s)" in text
    assert text.count("(FILTER class ") == 2
    assert f"FILTER partition (no row adds to two classes): class 1: {FEMALE} count; " \
           f"class 2: {MALE} count" in text
    assert "one share of ε 1, each class all of it at once; L1 sensitivity 1" in text
    plan = json.loads(subprocess.run([*args, "--json"], input=SEXES, capture_output=True,
                                     text=True, cwd=ROOT, check=True).stdout)
    assert plan["total_sensitivity"] == 1
    assert _statement(plan)["filter_partition"]["epsilon"] == 1.0


def test_the_released_cursor_says_what_explain_says(connect):
    """The cursor's ``sensitivity`` of the released statement is the partition's, as explain's
    (it added the classes up: 2 for the two sex counts)."""
    con = connect()
    for sql in (SEXES, BY_SEX):
        cur = con.cursor().execute(sql, epsilon=1)
        assert cur.sensitivity == con.explain(sql, epsilon=1)["total_sensitivity"] == 1
