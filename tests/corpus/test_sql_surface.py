"""The SQL that analysts actually write (queries_sql_surface.yaml), checked on neighbours.

Every entry runs on a real connection over the corpus catalogue (surface_data.py): ``explain``
must report the stated total sensitivity (and the stated key domains), ``execute`` must answer
at that sensitivity (nothing charged when it is 0); a refusal must be the stated error class,
name the offending part, carry a hint (the stated one, when given) and spend nothing. Every
answered entry then runs through the neighbour harness (tests/fuzz/neighbours.py): on D and on
D′ = D plus one adversarial person (one person replaced under ``replace``) every noised part's
exact values move by at most its reported sensitivity, and public answers are equal.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest
import yaml
from surface_data import d_tables, metadata, open_pair, tables_read

import dpsql
from neighbours import check_statement, variant_of, write_database

CORPUS = yaml.safe_load((Path(__file__).parent / "queries_sql_surface.yaml").read_text())
DIALECTS = ("postgres", "bigquery", "snowflake", "spark", "tsql", "mysql", "sqlite")
ERRORS_BY_CODE = {cls.code: cls for cls in (getattr(dpsql, name) for name in dpsql.__all__)
                  if isinstance(cls, type) and issubclass(cls, dpsql.Error)}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """Neighbouring pairs, opened on first use: by (variant, neighbouring, optional tables
    read, dialect)."""
    root = tmp_path_factory.mktemp("surface")
    opened: dict[tuple, object] = {}

    def pair_for(entry: dict, variant: int = 0):
        key = (variant, entry.get("neighbouring", "add_remove"), tables_read(entry["sql"]),
               entry.get("dialect"))
        if key not in opened:
            opened[key] = open_pair(root / f"pair{len(opened)}", variant=variant,
                                    neighbouring=key[1], include=key[2], dialect=key[3])
        return opened[key]

    yield pair_for
    for pair in opened.values():
        pair.close()


def _privacy(entry: dict) -> dict:
    epsilon = entry.get("epsilon", 1.0)
    return {"epsilon": epsilon, "delta": entry.get("delta")}


def _check_answer(entry: dict, con: dpsql.Connection) -> None:
    plan = con.explain(entry["sql"], **_privacy(entry))
    reported = plan["total_sensitivity"]
    assert reported == pytest.approx(entry["sensitivity"]), f"explain reports {reported}"
    if "keys" in entry:
        keys = plan["statements"][0].get("keys")
        assert keys is not None, "explain reports no keys for the statement"
        assert [(k["domain_size"], k["domain_source"]) for k in keys] == [
            (k["domain_size"], k["domain_source"]) for k in entry["keys"]], keys
    spent = con.budget_spent
    cursor = con.cursor().execute(entry["sql"], **_privacy(entry))
    assert cursor.description, "no result columns"
    rows = cursor.fetchall()
    if "rows" in entry:
        assert len(rows) == entry["rows"], f"released {len(rows)} rows"
    assert float(cursor.sensitivity) == pytest.approx(reported)
    if entry.get("charged") is False or reported == 0:
        assert con.budget_spent == spent, "a statement of sensitivity 0 was charged"
        assert not any(column.noise for column in cursor.description)


def _check_refusal(entry: dict, con: dpsql.Connection) -> None:
    spent = con.budget_spent
    with pytest.raises(dpsql.Error) as info:
        con.cursor().execute(entry["sql"], **_privacy(entry))
    error = info.value
    assert isinstance(error, ERRORS_BY_CODE[entry["refused"]]), f"{type(error).__name__}: {error}"
    assert entry["names"] in error.message, f"the message does not name {entry['names']!r}: {error}"
    assert error.hint, f"no hint says what to write instead: {error}"
    if "hint" in entry:
        assert entry["hint"] in error.hint, f"the hint does not say {entry['hint']!r}: {error.hint}"
    assert error.epsilon_spent == 0
    assert con.budget_spent == spent
    with pytest.raises(type(error)):
        con.explain(entry["sql"], **_privacy(entry))


@pytest.mark.parametrize("entry", CORPUS, ids=[e["id"] for e in CORPUS])
def test_surface_entry(entry, pairs):
    pair = pairs(entry)
    if "refused" in entry:
        _check_refusal(entry, pair.d)
    else:
        _check_answer(entry, pair.d)


@pytest.mark.parametrize("entry", [e for e in CORPUS if "refused" not in e],
                         ids=[e["id"] for e in CORPUS if "refused" not in e])
def test_surface_entry_on_neighbours(entry, pairs):
    """D and D′ (one adversarial person apart) answer alike within the sensitivity."""
    pair = pairs(entry, variant_of(entry["sql"]))
    outcome = check_statement(pair, entry["sql"], **_privacy(entry))
    expected = ("public", "released") if entry["sensitivity"] == 0 else ("released",)
    assert outcome in expected, f"{entry['id']}: {outcome}"


def test_surface_size_and_coverage():
    assert len(CORPUS) >= 80
    assert len({e["id"] for e in CORPUS}) == len(CORPUS)
    for entry in CORPUS:
        assert ("sensitivity" in entry) != ("refused" in entry), entry["id"]
        assert "refused" not in entry or entry.get("names"), entry["id"]
        assert entry.get("dialect") in (None, *DIALECTS), entry["id"]
        assert not math.isnan(float(entry.get("sensitivity", 0))), entry["id"]
    by_dialect = collections.Counter(e.get("dialect") for e in CORPUS)
    assert all(by_dialect[d] >= 4 for d in DIALECTS), by_dialect
    sql = " ".join(e["sql"].upper() for e in CORPUS)
    for construct in ("COALESCE(", "IFNULL(", "NVL(", "IF(", "NULLIF(", "SAFE_DIVIDE(", "CASE WHEN",
                      "DATE_DIFF(", "DATEDIFF(", "EXTRACT(MONTH", "EXTRACT(DOW", "EXTRACT(QUARTER",
                      "EXTRACT(HOUR", "EXTRACT(YEAR", "DATE_TRUNC(", "COUNTIF(", "TOP ",
                      "DIFFERENTIAL_PRIVACY", "VAR(", "PI()", "NEWCOMER.ORDERS", "FOO.VISITS",
                      "REGION_NAMES", "DAY_KINDS"):
        assert construct in sql, construct
    assert any(e.get("neighbouring") == "replace" for e in CORPUS)
    assert any(e.get("charged") is False for e in CORPUS)


def test_dialect_from_the_metadata(tmp_path):
    """A ``dialect:`` key in the metadata reads every statement with that dialect; the
    connect() keyword overrides it."""
    write_database(tmp_path, d_tables())
    meta = metadata(tmp_path, include=())
    meta["dialect"] = "bigquery"
    sql = "SELECT `day`, COUNTIF(amount > 50) AS big FROM `visits` GROUP BY `day`"
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1) as con:
        assert con.explain(sql, epsilon=1)["total_sensitivity"] == 6
    with dpsql.connect(metadata=meta, ledger=tmp_path / "l.sqlite", insecure_seed=1,
                       dialect="tsql") as con:
        top = "SELECT TOP 2 [day], COUNT(*) AS n FROM visits GROUP BY [day] ORDER BY n DESC"
        assert len(con.execute(top, epsilon=1).fetchall()) == 2


def test_unknown_dialect_is_refused_by_name(tmp_path):
    write_database(tmp_path, d_tables())
    with pytest.raises(dpsql.Error, match="klingon"):
        dpsql.connect(metadata=metadata(tmp_path, include=()), ledger=tmp_path / "l.sqlite",
                      dialect="klingon")
