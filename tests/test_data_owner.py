"""The data owner's view: what the declared metadata costs (``truncation_report``) and how a
table's source file is read (``csv:`` options and the errors of a source that does not fit)."""

from __future__ import annotations

import pandas as pd
from conftest import require_dataset

import dpsql

USER_NAMES = ["uid", "age", "gender", "occupation", "zip"]


def _users(gender: dict, **zip_code) -> dict:
    """MovieLens 100K's u.user (943 persons, one row each) with ``gender`` declared."""
    path = require_dataset("ml-100k/u.user")
    columns = {"age": {"type": "int", "lower": 7, "upper": 60}, "gender": gender}
    if zip_code:
        columns["zip"] = zip_code
    return {"name": "ml_users", "budget": 10, "tables": {"users": {
        "source": str(path), "privacy_unit": None,
        "csv": {"delimiter": "|", "header": False, "names": USER_NAMES},
        "columns": columns}}}


def _user_frame() -> pd.DataFrame:
    return pd.read_csv(require_dataset("ml-100k/u.user"), sep="|", header=None,
                       names=USER_NAMES, dtype=str)


def _report(metadata: dict, table: str, tmp_path) -> dict:
    with dpsql.connect_custodian(metadata=metadata, ledger=tmp_path / "c.sqlite") as con:
        return {(e["bound"], e["group"]): e for e in con.truncation_report(table)}


def test_a_wrong_values_list_shows_every_row_dropped(tmp_path):
    """values: [m, f] on data 'M'/'F': GROUP BY gender answered pure noise, and the report
    said 0 rows affected (it had no entry for a declared domain)."""
    wrong = _report(_users({"type": "text", "values": ["m", "f"]}), "users", tmp_path)
    entry = wrong[("values", "gender")]
    assert (entry["rows"], entry["rows_affected"], entry["persons_affected"]) == (943, 943, 943)
    assert entry["rows_share"] == 1.0 and entry["limit"] == ["m", "f"]
    right = _report(_users({"type": "text", "values": ["M", "F"]}), "users", tmp_path)
    assert right[("values", "gender")]["rows_affected"] == 0


def test_values_clamped_and_nulls_are_counted_per_column(tmp_path):
    """Ages above 60 are clamped; zip codes that are not numbers (Canadian ones) are NULL as
    an int: each count against pandas on the file itself."""
    users = _user_frame()
    ages = users["age"].astype(int)
    numeric_zip = pd.to_numeric(users["zip"], errors="coerce")
    zip_code = {"type": "int", "lower": 0, "upper": 99999}
    report = _report(_users({"type": "text", "values": ["M"]}, **zip_code), "users", tmp_path)
    assert report[("lower/upper", "age")]["rows_affected"] == ((ages < 7) | (ages > 60)).sum()
    assert report[("NULL", "age")]["rows_affected"] == 0
    assert report[("values", "gender")]["rows_affected"] == (users["gender"] == "F").sum()
    nulls = report[("NULL", "zip")]
    assert nulls["rows_affected"] == numeric_zip.isna().sum() > 0
    assert nulls["effect"] == "NULL (skipped by its aggregates)" and nulls["limit"] is None
    read_as = _report(_users({"type": "text", "values": ["M", "F"]}, **zip_code,
                             missing_value=0), "users", tmp_path)[("NULL", "zip")]
    assert read_as["effect"] == "NULL (read as 0)"
    assert read_as["rows_affected"] == nulls["rows_affected"]


def test_a_domain_counts_persons_and_reads_nulls_as_the_missing_value(tmp_path):
    """Person-level: MovieLens ratings whose declared values leave out 5 (pandas counts the
    ratings of 5 and the users who gave one); a NULL read as a declared value is inside."""
    path = require_dataset("ml-100k/u.data")
    ratings = pd.read_csv(path, sep="\t", header=None, names=["user", "item", "rating", "ts"])
    meta = {"name": "ml", "budget": 10, "tables": {"ratings": {
        "source": str(path), "privacy_unit": "user", "max_groups_per_unit": 5,
        "max_rows_per_group": 1,
        "csv": {"delimiter": "\t", "header": False, "names": ["user", "item", "rating", "ts"]},
        "columns": {"user": "int", "rating": {"type": "int", "values": [1, 2, 3, 4]}}}}}
    report = _report(meta, "ratings", tmp_path)
    entry = report[("values", "rating")]
    fives = ratings[ratings["rating"] == 5]
    assert (entry["rows"], entry["persons"]) == (100_000, 943)
    assert entry["rows_affected"] == len(fives)
    assert entry["persons_affected"] == fives["user"].nunique()

    source = tmp_path / "t.csv"
    source.write_text("uid,kind\n1,a\n1,\n2,b\n3,x\n")
    meta = {"tables": {"t": {"source": str(source), "privacy_unit": "uid",
                             "max_groups_per_unit": 2, "max_rows_per_group": 1,
                             "columns": {"uid": "int", "kind": {
                                 "type": "text", "values": ["a", "b"], "missing_value": "a"}}}}}
    report = _report(meta, "t", tmp_path)
    assert report[("values", "kind")]["rows_affected"] == 1  # only x; the NULL reads as a
    assert report[("NULL", "kind")]["rows_affected"] == 1


def test_date_bounds_are_measured(tmp_path):
    """A date column with bounds made the report fail (its ISO bounds were read as numbers)."""
    source = tmp_path / "d.csv"
    source.write_text("uid,day\n1,2023-12-31\n1,2024-06-01\n2,2025-01-02\n3,\n")
    meta = {"tables": {"d": {"source": str(source), "privacy_unit": "uid",
                             "max_groups_per_unit": 1, "max_rows_per_group": 1,
                             "columns": {"day": {"type": "date", "lower": "2024-01-01",
                                                 "upper": "2024-12-31"}}}}}
    entry = _report(meta, "d", tmp_path)[("lower/upper", "day")]
    assert (entry["rows_affected"], entry["persons_affected"], entry["persons"]) == (2, 2, 3)


def test_the_domain_statements_are_logged_as_exact_accesses(tmp_path):
    meta = _users({"type": "text", "values": ["m", "f"]})
    with dpsql.connect_custodian(metadata=meta, ledger=tmp_path / "c.sqlite") as con:
        report = con.truncation_report()
        logged = [r["statement"] for r in con.ledger.history() if r["kind"] == "exact"]
    assert len(logged) == len(report) == 4  # age: clamped, NULL; gender: values, NULL
    assert any("NOT IN ('m', 'f')" in sql for sql in logged)
